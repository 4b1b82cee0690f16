"""The serving loop on its own (no HTTP): continuous batching returns exactly plain greedy decoding
whatever joins the batch when, chunked and batched prefill agree, the KV admission limit holds,
and a finished conversation's next turn starts from the cache."""

from __future__ import annotations

import threading

import pytest

from aisql.engine import load_engine
from aisql.engine.base import GenerateRequest
from aisql.engine.continuous import FinishEvent, ServeRequest, ServingEngine, TokenEvent


@pytest.fixture(scope="module")
def engine():
    return load_engine("tiny")


class Collector:
    def __init__(self, count: int) -> None:
        self.tokens: dict[int, list[int]] = {i: [] for i in range(count)}
        self.finished: dict[int, FinishEvent] = {}
        self.done = threading.Event()
        self.count = count

    def sink(self, index: int):
        def sink(event) -> None:
            if isinstance(event, TokenEvent):
                self.tokens[index].extend(event.token_ids)
            else:
                self.finished[index] = event
                if len(self.finished) == self.count:
                    self.done.set()

        return sink


def prompts(engine, count: int) -> list[tuple[int, ...]]:
    base = engine.tokenizer.encode("The quick brown fox jumps over the lazy dog. " * 6)
    return [tuple(base[: 8 + 9 * i] + engine.tokenizer.encode(f" request {i}: say something")) for i in range(count)]


def run_all(serving: ServingEngine, requests: list[ServeRequest]) -> Collector:
    collector = Collector(len(requests))
    for i, request in enumerate(requests):
        serving.submit(request, collector.sink(i))
    assert collector.done.wait(120), "requests did not finish"
    return collector


@pytest.mark.parametrize("mixed", [True, False], ids=["one-pass", "separate-passes"])
@pytest.mark.parametrize("pass_tokens", [16, 2048])
def test_continuous_batching_equals_plain_greedy(engine, pass_tokens, mixed):
    texts = prompts(engine, 8)
    plain = engine.generate([GenerateRequest(p, 12 + i) for i, p in enumerate(texts)], reuse=False, speculative=False)
    engine.reset_cache()
    serving = ServingEngine(engine, pass_tokens=pass_tokens, mixed=mixed)
    try:
        got = run_all(serving, [ServeRequest(p, 12 + i) for i, p in enumerate(texts)])
    finally:
        serving.close()
    assert [tuple(got.tokens[i]) for i in range(8)] == [g.token_ids for g in plain]
    assert all(got.finished[i].finish_reason == plain[i].finish_reason for i in range(8))
    assert sum(f.cached_tokens for f in got.finished.values()) > 0, "prompts sharing a beginning reuse its KV"


def test_kv_admission_limit_holds(engine):
    texts = prompts(engine, 4)
    needs = [len(p) + 20 for p in texts]
    limit = needs[-1] + needs[-2]  # room for two of them at a time
    serving = ServingEngine(engine, max_kv_tokens=limit)
    most = []
    execute = serving.execute

    def counting_execute(plan):
        admitted = list(serving.scheduler.running) + [state.handle for state in serving.scheduler.prefilling]
        most.append(sum(h.request.kv_need for h in admitted))
        return execute(plan)

    serving.execute = counting_execute
    try:
        got = run_all(serving, [ServeRequest(p, 20) for p in texts])
    finally:
        serving.close()
    assert max(most) <= limit
    plain = engine.generate([GenerateRequest(p, 20) for p in texts], reuse=False, speculative=False)
    assert [tuple(got.tokens[i]) for i in range(4)] == [g.token_ids for g in plain]


def test_next_turn_starts_from_the_finished_conversation(engine):
    engine.reset_cache()
    serving = ServingEngine(engine)
    try:
        prompt = prompts(engine, 1)[0]
        first = run_all(serving, [ServeRequest(prompt, 10)])
        follow = prompt + tuple(first.tokens[0]) + tuple(engine.tokenizer.encode(" and then?"))
        second = run_all(serving, [ServeRequest(follow, 5)])
    finally:
        serving.close()
    # Prompt + output but its last token (never run through the model) are cached.
    assert second.finished[0].cached_tokens == len(prompt) + len(first.tokens[0]) - 1


@pytest.mark.parametrize("pass_tokens", [16, 2048])  # chunked (start_sequence) and batched prefill
def test_a_prompt_leaving_a_cached_turn_midway_reuses_the_shared_part(engine, pass_tokens):
    """The finished turn is one edge of the tree; a prompt sharing its first k tokens matches into
    the middle of that edge and starts from k cached tokens (it used to count 0 on the chunked
    path), with the output of plain greedy decoding."""
    engine.reset_cache()
    serving = ServingEngine(engine, pass_tokens=pass_tokens)
    try:
        prompt = prompts(engine, 1)[0]
        run_all(serving, [ServeRequest(prompt, 4)])
        shared = len(prompt) - 6
        other = prompt[:shared] + tuple(engine.tokenizer.encode(" Tell me about owls"))
        assert other[shared] != prompt[shared]
        assert engine.cached_prefix_length(other) == shared
        second = run_all(serving, [ServeRequest(other, 6)])
    finally:
        serving.close()
    plain = engine.generate([GenerateRequest(other, 6)], reuse=False, speculative=False)
    assert second.finished[0].cached_tokens == shared
    assert second.tokens[0] == list(plain[0].token_ids)


def test_cancel_before_and_during(engine):
    serving = ServingEngine(engine)
    try:
        collector = Collector(2)
        running = serving.submit(ServeRequest(prompts(engine, 1)[0], 4000), collector.sink(0))
        waiting = serving.submit(ServeRequest(prompts(engine, 2)[1], 5), collector.sink(1))
        waiting.cancel()
        running.cancel()
        assert collector.done.wait(60)
        assert {f.finish_reason for f in collector.finished.values()} <= {"cancelled", "length"}
        assert collector.finished[0].finish_reason == "cancelled"
    finally:
        serving.close()
    assert serving.rows == [] and serving.scheduler.prefilling == []


def test_rejects_what_cannot_fit(engine):
    serving = ServingEngine(engine)
    try:
        with pytest.raises(ValueError, match="exceeds the model's context"):
            serving.submit(ServeRequest((1,) * 10, engine.info.max_context), lambda event: None)
        with pytest.raises(ValueError, match="empty"):
            serving.submit(ServeRequest((), 5), lambda event: None)
    finally:
        serving.close()


class OnlyTheBackend:
    """The engine seen through the declared ServingBackend interface alone: any other member the
    serving loop reached for would raise AttributeError here."""

    def __init__(self, engine) -> None:
        from aisql.engine.continuous.backend import ServingBackend

        names = {n for n in dir(ServingBackend) if not n.startswith("_")} | set(ServingBackend.__annotations__)
        object.__setattr__(self, "_engine", engine)
        object.__setattr__(self, "_names", names)

    def __getattr__(self, name):
        if name not in self._names:
            raise AttributeError(f"the serving loop used {name!r}, which ServingBackend does not declare")
        return getattr(self._engine, name)


@pytest.mark.parametrize("pass_tokens", [16, 2048])
def test_the_loop_needs_only_the_declared_backend(engine, pass_tokens):
    from aisql.engine.continuous.backend import ServingBackend

    assert isinstance(engine, ServingBackend)
    texts = prompts(engine, 3)
    plain = engine.generate([GenerateRequest(p, 6) for p in texts], reuse=False, speculative=False)
    engine.reset_cache()
    serving = ServingEngine(OnlyTheBackend(engine), pass_tokens=pass_tokens)
    try:
        got = run_all(serving, [ServeRequest(p, 6) for p in texts])
    finally:
        serving.close()
    assert [tuple(got.tokens[i]) for i in range(3)] == [g.token_ids for g in plain]
    assert all(f.finish_reason != "error" for f in got.finished.values())
