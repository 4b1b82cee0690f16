"""GGUF model files: converted once into aisql's model cache, then loaded like any checkpoint; the
model's identity is the file's content; files that cannot be converted are one clear error.
Tested on the tiny model written as GGUF (tests/gguf_writer.py), not the 98 MB real model."""

from __future__ import annotations

import os
import pytest
from conftest import EXAMPLES
from gguf_writer import write_tiny_gguf

from aisql.engine import ScoreRequest, load_engine
from aisql.engine.model.resolving import resolve_model
from aisql.engine.options import EngineOptions
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


def test_explain_reads_a_gguf_header_and_converts_nothing(tmp_path, tiny_gguf, monkeypatch):
    """explain is run before paying: its facts of a GGUF model come from the header (was: the whole
    file converted first — 119 s and ~5 GB for Qwen2.5-Coder-0.5B)."""
    from aisql.engine.model import gguf as gguf_module
    from aisql.engine.model.facts import model_facts
    from aisql.engine.model.gguf_facts import gguf_model_facts
    from aisql.engine.model.loader import load_model_facts

    copy = tmp_path / "fresh.gguf"  # never converted in this test's cache dir
    copy.write_bytes(tiny_gguf.read_bytes())
    monkeypatch.setenv("AISQL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(gguf_module, "convert", lambda *a, **k: pytest.fail("explain converted the GGUF file"))
    facts = load_model_facts(resolve_model(str(copy)), EngineOptions(dtype="float32"))
    assert not (tmp_path / "cache" / "models").exists()

    # the same ids, labels, end of answer and shape as the source model's own files
    source = model_facts(tiny_model_dir(), "tiny", "float32")
    texts = ["hello world", "Is the tea hot? {x} ünï"]
    assert facts.format.encode_prompts("Answer.", texts) == source.format.encode_prompts("Answer.", texts)
    assert [facts.encode_label(label) for label in ("Yes", "No", "10")] == [source.encode_label(label) for label in ("Yes", "No", "10")]
    assert facts.format.end_of_answer == source.format.end_of_answer is not None
    mine, theirs = facts.profile, source.profile
    assert (mine.layers, mine.attention_width, mine.kv_bytes_per_token, mine.max_context) == (
        theirs.layers, theirs.attention_width, theirs.kv_bytes_per_token, theirs.max_context)
    assert abs(mine.params - theirs.params) <= 0.01 * theirs.params
    assert gguf_model_facts(copy, mine.name, "float32").profile == mine  # a second read: the kept profile


@pytest.mark.slow
def test_the_load_time_kept_for_explain_leaves_the_conversion_out(tmp_path, tiny_gguf, monkeypatch):
    """A first run's GGUF conversion is paid once; explain's "model load" figure is what every
    run pays (was: 66 s remembered for a 4 s load, the conversion included)."""
    from aisql.engine.model import gguf as gguf_module
    from aisql.executor import session as session_module
    from aisql.executor.session import ModelSession

    monkeypatch.setenv("AISQL_CACHE_DIR", str(tmp_path / "cache"))
    clock = [0.0]
    real_convert = gguf_module.convert

    def slow_convert(path, notify=None):
        if not (gguf_module.converted_directory(path) / "config.json").exists():
            clock[0] += 100.0  # a conversion "takes" 100 s of the clock the session reads
        return real_convert(path, notify)

    monkeypatch.setattr(gguf_module, "convert", slow_convert)
    monkeypatch.setattr(session_module.time, "perf_counter", lambda: clock[0])
    session = ModelSession(model=str(tiny_gguf), cache=False, warn=lambda message: None)
    session.engine
    assert clock[0] == 100.0 and session.load_s is not None and session.load_s < 100.0
