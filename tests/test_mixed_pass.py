"""One pass for prefill and decode: the serving loop's mixed pass carries running requests' decode
tokens and prompt chunks together, attends per piece over each request's own KV, and returns what
one request alone would."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F

from aisql.engine import load_engine
from aisql.engine.base import GenerateRequest
from aisql.engine.continuous import ServeRequest, ServingEngine, TokenEvent
from aisql.engine.continuous import mixed_pass
from aisql.engine.continuous.mixed_pass import Piece, _in_two_parts
from aisql.engine.continuous.sequence_kv import SequenceKV


@pytest.fixture(scope="module")
def engine():
    return load_engine("tiny")


@pytest.mark.parametrize("start,tokens", [(0, 7), (40, 1), (40, 1 + 4), (300, 64)])
def test_two_part_attention_equals_one_masked_call(start, tokens):
    """The piece against the sequence before it (no mask) and against itself (causal), merged by
    log-sum-exps, equals one masked attention over everything (GQA: 3 KV heads, 3 queries each)."""
    if mixed_pass._flash_with_lse is None:
        pytest.skip("this torch has no CPU flash attention with log-sum-exps")
    torch.manual_seed(0)
    kv_heads, groups, dim = 3, 3, 16
    kv = SequenceKV(layers=1, capacity=start + tokens)
    kv.write(0, 0, torch.randn(kv_heads, start + tokens, dim), torch.randn(kv_heads, start + tokens, dim))
    stacked = torch.randn(kv_heads, groups * tokens, dim)
    got = _in_two_parts(Piece(kv, list(range(tokens)), start), 0, stacked, groups, None)
    keys, values = kv.view(0, start + tokens)
    causal = torch.ones(tokens, tokens, dtype=torch.bool).tril()
    mask = torch.cat([torch.ones(tokens, start, dtype=torch.bool), causal], dim=1).repeat(groups, 1)
    expected = F.scaled_dot_product_attention(stacked, keys, values, attn_mask=mask)
    assert torch.allclose(got, expected, atol=1e-5)


def test_decode_rows_ride_in_the_prompt_chunks_pass(engine, monkeypatch):
    """A request decoding while a long prompt arrives: some pass carries both its decode token and
    a chunk of the prompt (the pass's composition is recorded, nothing is timed), and both
    requests return exactly plain greedy decoding."""
    base = engine.tokenizer.encode("The quick brown fox jumps over the lazy dog. " * 4)
    first = tuple(base + engine.tokenizer.encode(" first request"))
    second = tuple(engine.tokenizer.encode("A different opening about ships and harbours. " * 12))
    plain = engine.generate([GenerateRequest(first, 40), GenerateRequest(second, 8)], reuse=False, speculative=False)
    engine.reset_cache()
    compositions = []
    decoding = threading.Event()
    real = mixed_pass.run_mixed

    def recording(runner, pieces):
        compositions.append([(len(p.tokens), p.start) for p in pieces])
        return real(runner, pieces)

    monkeypatch.setattr(mixed_pass, "run_mixed", recording)
    serving = ServingEngine(engine, pass_tokens=32)
    tokens: dict[int, list[int]] = {0: [], 1: []}
    done = [threading.Event(), threading.Event()]

    def sink(index):
        def receive(event):
            if isinstance(event, TokenEvent):
                tokens[index].extend(event.token_ids)
                if index == 0 and len(tokens[0]) >= 2:
                    decoding.set()
            else:
                done[index].set()

        return receive

    try:
        serving.submit(ServeRequest(first, 40, speculative=False), sink(0))
        assert decoding.wait(60), "the first request never started decoding"
        serving.submit(ServeRequest(second, 8, speculative=False), sink(1))
        assert done[0].wait(120) and done[1].wait(120)
    finally:
        serving.close()
    assert tokens[0] == list(plain[0].token_ids) and tokens[1] == list(plain[1].token_ids)
    mixed = [c for c in compositions if any(n == 1 for n, _ in c) and any(n > 1 for n, _ in c)]
    assert mixed, "no pass carried a decode row and a prompt chunk together"
    assert serving.stats.mixed_passes == len(mixed)
    assert all(sum(n for n, _ in c) <= 32 for c in mixed), "a pass with a decoding request kept to the token budget"


def test_the_budget_protects_decoding_requests_and_only_them():
    """With requests decoding, prompt chunks fill the pass up to the budget; with none decoding a
    pass takes prompts up to the idle budget (nobody waits on its length)."""
    from aisql.engine.continuous.request import RequestHandle
    from aisql.engine.continuous.scheduler import ServingScheduler

    scheduler = ServingScheduler(max_running=8, pass_tokens=64, max_kv_tokens=10_000, cached_prefix=lambda prompt, salt: 0, idle_pass_tokens=1000)
    handles = [RequestHandle(ServeRequest(tuple(range(300)), 4), lambda event: None) for _ in range(3)]
    scheduler.add(handles)
    idle = scheduler.schedule()
    assert [tokens for _, tokens in idle.chunks] == [300, 300, 300]
    scheduler.running = [handles[0]]
    scheduler.prefilling = []
    scheduler.add([RequestHandle(ServeRequest(tuple(range(300)), 4), lambda event: None)])
    busy = scheduler.schedule()
    assert [tokens for _, tokens in busy.chunks] == [64 - 1]
