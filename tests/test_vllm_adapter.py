"""The vLLM adapter against a stand-in for vLLM's API (tests/fakes/vllm): same answers as HFEngine."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from aisql.engine import EngineOptions, GenerateRequest, ScoreRequest, load_engine
from aisql.engine.model.tiny import tiny_model_dir
from aisql.errors import ModelError
IF_INSTRUCTION = "You are a careful data analyst. Decide whether the statement about the data is true. Answer TRUE or FALSE only."

FAKES = str(Path(__file__).parent / "fakes")
TEXTS = ["A tent for two.", "Espresso grinder with forty settings.", "Yoga mat, six millimetres thick."]


def test_missing_vllm_gives_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    with pytest.raises(ModelError, match="vllm package, which is not installed") as info:
        load_engine("vllm:Qwen/Qwen3-0.6B")
    assert "aisql-engine[vllm]" in info.value.hint


@pytest.fixture
def fake_vllm(monkeypatch):
    monkeypatch.syspath_prepend(FAKES)
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    yield
    sys.modules.pop("vllm", None)


def test_adapter_matches_the_built_in_engine(fake_vllm, tiny_engine):
    engine = load_engine(f"vllm:{tiny_model_dir()}")
    import vllm

    llm = vllm.created[-1]
    assert llm.enable_prefix_caching and llm.logprobs_mode == "processed_logprobs"
    assert llm.speculative_config["method"] == "ngram"
    assert engine.info.name.startswith("vllm:")

    labels = tuple(engine.encode_label(l) for l in ["TRUE", "FALSE", "somewhat neutral"])
    requests = [ScoreRequest(i, labels) for i in engine.encode_prompts(IF_INSTRUCTION, TEXTS)]
    for got, expected in zip(engine.score(requests), tiny_engine.score(requests, reuse=False)):
        assert max(abs(a - b) for a, b in zip(got.logprobs, expected.logprobs)) < 1e-4

    generate = [GenerateRequest(r.prompt_ids, 7) for r in requests]
    got = engine.generate(generate)
    expected = tiny_engine.generate(generate, reuse=False, speculative=False)
    assert [g.token_ids for g in got] == [g.token_ids for g in expected]
    assert [g.text for g in got] == [g.text for g in expected]


def test_adapter_options(fake_vllm):
    load_engine(f"vllm:{tiny_model_dir()}", EngineOptions(prefix_cache=False, speculative=False))
    import vllm

    assert not vllm.created[-1].enable_prefix_caching and vllm.created[-1].speculative_config is None
