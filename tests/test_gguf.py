"""GGUF model files: converted once into aisql's model cache, then loaded like any checkpoint; the
model's identity is the file's content; files that cannot be converted are one clear error.
Tested on the tiny model written as GGUF (tests/gguf_writer.py), not the 98 MB real model."""

from __future__ import annotations

import os
import pytest
from conftest import EXAMPLES
from gguf_writer import write_tiny_gguf

from aisql.engine import ScoreRequest, load_engine
from aisql.engine.model.loader import EngineOptions, resolve_model
from aisql.engine.model.tiny import tiny_model_dir
from aisql.errors import ModelError
from tests.test_cli import run_cli


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    return write_tiny_gguf(tiny_model_dir(), tmp_path_factory.mktemp("gguf") / "tiny-model.gguf")


@pytest.mark.slow
def test_a_gguf_file_answers_as_its_source_model(tiny_gguf, tiny_engine):
    engine = load_engine(str(tiny_gguf), EngineOptions(dtype="float32"))  # the source's numerics, to compare
    texts = ["hello world", "Is the tea hot?"]
    ids = tiny_engine.encode_prompts("Answer.", texts)
    assert engine.encode_prompts("Answer.", texts) == ids
    labels = (tiny_engine.encode_label("Yes", " "), tiny_engine.encode_label("No", " "))
    got = engine.score([ScoreRequest(i, labels) for i in ids], reuse=False)
    want = tiny_engine.score([ScoreRequest(i, labels) for i in ids], reuse=False)
    assert all(abs(a - b) < 1e-5 for g, w in zip(got, want) for a, b in zip(g.logprobs, w.logprobs))
    resolved = resolve_model(str(tiny_gguf))
    assert resolved.backend == "gguf" and engine.info.fingerprint == resolved.fingerprint(EngineOptions())
    assert engine.info.fingerprint.startswith("gguf-") and engine.info.fingerprint != tiny_engine.info.fingerprint


@pytest.mark.slow
def test_conversion_happens_once_and_the_cli_runs_on_it(tiny_gguf):
    query = "SELECT name FROM 'data/customers.csv' WHERE id <= 5 AND AI.IF(PROMPT('{profile} likes tea')) ORDER BY name"
    first = run_cli("run", "-e", query, "--model", str(tiny_gguf), "--format", "csv", cwd=EXAMPLES)
    again = run_cli("run", "-e", query, "--model", str(tiny_gguf), "--format", "csv", cwd=EXAMPLES)
    reference = run_cli("run", "-e", query, "--model", "tiny", "--format", "csv", cwd=EXAMPLES)
    assert first.exit_code == again.exit_code == 0, first.output
    assert first.stdout == again.stdout == reference.stdout
    assert "converting" not in again.stderr  # the converted copy is reused


def test_a_fingerprint_needs_no_conversion(tmp_path, tiny_gguf):
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(tiny_gguf.read_bytes())
    from aisql.engine.model.gguf import converted_directory

    assert resolve_model(str(copy)).fingerprint(EngineOptions()) == resolve_model(str(tiny_gguf)).fingerprint(EngineOptions())
    assert converted_directory(copy) == converted_directory(tiny_gguf)  # keyed by content, not path


def test_an_unsupported_architecture_is_one_error(tmp_path):
    odd = write_tiny_gguf(tiny_model_dir(), tmp_path / "odd.gguf", architecture="notanarchitecture")
    with pytest.raises(ModelError, match="architecture 'notanarchitecture' cannot be read from GGUF"):
        load_engine(str(odd))


def test_a_file_that_is_not_gguf_is_one_error(tmp_path):
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"not a gguf file at all")
    with pytest.raises(ModelError, match="is not a readable GGUF file"):
        load_engine(str(bogus))
    with pytest.raises(ModelError, match="does not exist"):
        load_engine(str(tmp_path / "missing.gguf"))


def test_too_large_for_free_memory_is_refused_before_dequantizing(tmp_path, tiny_gguf, monkeypatch):
    from aisql.engine.model import gguf

    copy = tmp_path / "big.gguf"
    copy.write_bytes(tiny_gguf.read_bytes() + b"\0")  # another file: not converted yet
    monkeypatch.setattr(gguf, "available_host_memory", lambda: 1000)
    with pytest.raises(ModelError, match="converting it needs about"):
        load_engine(str(copy))


def test_too_large_for_free_disk_is_refused_before_dequantizing(tmp_path, tiny_gguf, monkeypatch):
    from aisql.engine.model import gguf

    copy = tmp_path / "big-on-disk.gguf"
    copy.write_bytes(tiny_gguf.read_bytes() + b"\0\0")  # another file: not converted yet
    monkeypatch.setattr(gguf, "free_disk_bytes", lambda directory: 1000)
    with pytest.raises(ModelError, match="converted model needs about .* of disk in"):
        load_engine(str(copy))
    assert not gguf.converted_directory(copy).exists()


def test_a_build_abandoned_by_a_killed_process_is_swept(tmp_path):
    """Was: a kill -9 during a GGUF conversion left its staging directory (GBs) behind for good."""
    import subprocess
    import sys

    from aisql.paths import build_directory_once

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    target = tmp_path / "model-abc"
    abandoned = tmp_path / f".model-abc.{dead}.x1y2"
    abandoned.mkdir()
    (abandoned / "model.safetensors").write_bytes(b"half a model")
    live = tmp_path / f".model-abc.{os.getppid()}.z3"  # a build in progress elsewhere: kept
    live.mkdir()

    build_directory_once(target, lambda staging: (staging / "config.json").write_text("{}"), "build")
    assert (target / "config.json").exists()
    assert not abandoned.exists() and live.exists()
