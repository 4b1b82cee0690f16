"""Model specs: the offline fallback for the default model, and clear errors for bad specs."""

from __future__ import annotations

import pytest

from aisql.engine import DEFAULT_MODEL, load_engine
from aisql.engine.tiny import tiny_model_dir
from aisql.errors import ModelError


@pytest.fixture
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty local cache
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("AISQL_MODEL", raising=False)


def test_default_model_falls_back_to_tiny_with_a_warning(offline):
    warnings = []
    engine = load_engine(None, warn=warnings.append)
    assert engine.info.name == "tiny"
    assert len(warnings) == 1 and DEFAULT_MODEL in warnings[0] and "tiny" in warnings[0]


def test_aisql_model_environment_variable(offline, monkeypatch):
    monkeypatch.setenv("AISQL_MODEL", "tiny")
    warnings = []
    assert load_engine(None, warn=warnings.append).info.name == "tiny"
    assert warnings == []


def test_explicit_model_never_falls_back(offline):
    with pytest.raises(ModelError, match="unreachable"):
        load_engine("Qwen/Qwen3-0.6B")


def test_local_model_directory_loads(offline):
    engine = load_engine(str(tiny_model_dir()))
    assert engine.info.source.startswith("local directory")
    assert engine.info.fingerprint == load_engine("tiny").info.fingerprint


@pytest.mark.parametrize(
    "spec, message",
    [
        ("not a model!", "unknown model"),
        ("./nowhere/model", "does not exist"),
        ("openai:gpt-x", "cannot read the remote model"),
        ("openai:tiny@localhost:1", "cannot read the remote model"),
        ("openai:no/such-model@http://127.0.0.1:9/v1", "the tokenizer of 'no/such-model' is needed here"),
    ],
)
def test_bad_specs(offline, spec, message):
    with pytest.raises(ModelError, match=message):
        load_engine(spec)


def test_directory_without_config(offline, tmp_path):
    with pytest.raises(ModelError, match="not a model directory"):
        load_engine(str(tmp_path))


def test_an_unreachable_hub_is_remembered(offline, monkeypatch):
    """An offline machine pays the Hub probe once an hour, not at every run."""
    from aisql.engine import loader

    probes = []
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9/remembered")
    monkeypatch.setattr(loader, "_reachable", lambda endpoint: probes.append(endpoint) or False)
    for _ in range(3):
        with pytest.raises(ModelError, match="unreachable"):
            loader._hub_snapshot("Qwen/Qwen3-0.6B")
    assert probes == ["http://127.0.0.1:9/remembered"]


def test_a_cached_snapshot_is_found_without_the_network(offline, tmp_path, monkeypatch):
    from aisql.engine import loader

    snapshot = tmp_path / "hf" / "hub" / "models--org--m" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("abc")
    monkeypatch.setattr(loader, "_reachable", lambda endpoint: pytest.fail("probed the network"))
    assert loader._hub_snapshot("org/m", weights=False) == snapshot
    with pytest.raises(ModelError, match="unreachable"):  # no weights in it: not enough to load
        monkeypatch.setattr(loader, "_reachable", lambda endpoint: False)
        loader._hub_snapshot("org/m", weights=True)
