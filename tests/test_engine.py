"""The HF engine on the tiny model: batching is lossless, work is counted exactly."""

from __future__ import annotations

import random

import pytest
import torch

from aisql.engine import GenerateRequest, ScoreRequest
from aisql.executor.tasks import IF_INSTRUCTION

TEXTS = [
    "Maria, 67, is a university student of biology. She might buy a tent.",
    "Jonas is a photographer who travels a lot.",
    "Short.",
    "A much longer text about a customer who runs half marathons on weekends and grows tomatoes on a balcony, "
    "and who recently moved into a small flat and wants to furnish it on a budget.",
] + [f"Prompt number {i} about product {i * 7} and customer {i * 13}." for i in range(20)]


@pytest.fixture
def engine(tiny_engine):
    return tiny_engine


def _ids(engine):
    return engine.encode_prompts(IF_INSTRUCTION, TEXTS)


def test_prompt_format_uses_chat_template_and_shares_the_instruction_prefix(engine):
    ids = _ids(engine)
    prefix = engine.encode_prompt(IF_INSTRUCTION, "")
    shared = 0
    while shared < len(prefix) and all(len(i) > shared and i[shared] == prefix[shared] for i in ids):
        shared += 1
    assert shared >= 20  # system block + user header are one common prefix
    assert engine.encode_prompt(IF_INSTRUCTION, TEXTS[0]) == ids[0]  # batch == one at a time


def test_batched_scores_equal_one_at_a_time(engine):
    labels = (engine.encode_label("TRUE"), engine.encode_label("FALSE"))
    requests = [ScoreRequest(i, labels) for i in _ids(engine)]
    batched = engine.score(requests)
    single = [engine.score([r])[0] for r in requests]
    for a, b in zip(batched, single):
        assert a.best == b.best
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-4


def test_multi_token_labels_equal_one_at_a_time_and_full_likelihood(engine):
    labels = tuple(engine.encode_label(l) for l in ["positive", "negative", "somewhat neutral", "x"])
    assert any(len(l) > 1 for l in labels) and any(len(l) == 1 for l in labels)
    requests = [ScoreRequest(i, labels) for i in _ids(engine)[:8]]
    batched = engine.score(requests)
    single = [engine.score([r])[0] for r in requests]
    for a, b in zip(batched, single):
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-4
    # Against a plain full-vocabulary computation of log P(label | prompt), renormalised over labels.
    model = engine.model
    for request, scores in zip(requests, batched):
        totals = []
        for label in labels:
            ids = torch.tensor([list(request.prompt_ids) + list(label)])
            with torch.inference_mode():
                logp = torch.log_softmax(model(ids).logits[0].double(), dim=-1)
            start = len(request.prompt_ids) - 1
            totals.append(sum(float(logp[start + j, t]) for j, t in enumerate(label)))
        reference = torch.log_softmax(torch.tensor(totals), dim=0).tolist()
        assert max(abs(x - y) for x, y in zip(reference, scores.logprobs)) < 1e-4


def test_single_token_labels_take_one_forward_pass_per_batch(engine):
    labels = (engine.encode_label("TRUE"), engine.encode_label("FALSE"))
    assert all(len(l) == 1 for l in labels)
    requests = [ScoreRequest(i, labels) for i in _ids(engine)]
    before = engine.stats.copy()
    engine.score(requests)
    delta = engine.stats.since(before)
    assert delta.forward_passes == 1
    assert delta.computed_tokens == sum(len(r.prompt_ids) for r in requests)
    assert delta.computed_tokens == sum(r.standalone_tokens() for r in requests)


def test_score_token_accounting_with_tails(engine):
    labels = tuple(engine.encode_label(l) for l in ["positive", "somewhat neutral"])
    requests = [ScoreRequest(i, labels) for i in _ids(engine)[:5]]
    before = engine.stats.copy()
    engine.score(requests)
    delta = engine.stats.since(before)
    assert delta.computed_tokens == sum(r.standalone_tokens() for r in requests)
    assert delta.forward_passes == 2  # prompts, then all label tails against their cache


def test_batched_generation_equals_one_at_a_time(engine):
    rng = random.Random(0)
    requests = [GenerateRequest(i, rng.randint(1, 12)) for i in _ids(engine)]
    batched = engine.generate(requests)
    single = [engine.generate([r])[0] for r in requests]
    for request, a, b in zip(requests, batched, single):
        assert a.token_ids == b.token_ids
        assert a.text == b.text
        assert len(a.token_ids) <= request.max_tokens


def test_generation_token_accounting(engine):
    requests = [GenerateRequest(i, 5) for i in _ids(engine)[:6]]
    before = engine.stats.copy()
    generations = engine.generate(requests)
    delta = engine.stats.since(before)
    assert delta.computed_tokens == sum(g.standalone_tokens(r) for r, g in zip(requests, generations))


def test_tiny_model_note_and_determinism(engine, tmp_path):
    from aisql.engine.tiny import TinyConfig, build_tiny_model

    assert engine.info.is_test_model and "meaningless" in engine.info.note
    a, b = tmp_path / "a", tmp_path / "b"
    build_tiny_model(a, TinyConfig())
    build_tiny_model(b, TinyConfig())
    for name in ("tokenizer.json", "model.safetensors"):
        assert (a / name).read_bytes() == (b / name).read_bytes()


def test_default_model_architecture_batches_losslessly(tmp_path):
    """Qwen3 (the default model's architecture, random weights) through the local-directory loader."""
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    from aisql.engine import load_engine
    from aisql.engine.tiny import tiny_model_dir

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir())
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
        initializer_range=0.5, eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=True,
    )
    Qwen3ForCausalLM(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    engine = load_engine(str(tmp_path))
    ids = engine.encode_prompts(IF_INSTRUCTION, TEXTS[:10])
    labels = tuple(engine.encode_label(l) for l in ["TRUE", "FALSE", "somewhat neutral"])
    requests = [ScoreRequest(i, labels) for i in ids]
    for a, b in zip(engine.score(requests), [engine.score([r])[0] for r in requests]):
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-4
    generate = [GenerateRequest(i, 6) for i in ids]
    assert [g.token_ids for g in engine.generate(generate)] == [engine.generate([r])[0].token_ids for r in generate]
