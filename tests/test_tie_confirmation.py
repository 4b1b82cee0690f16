"""bfloat16 near ties answered in float32 (aisql.engine.model.tie_confirmation): a planned and a
naive run agree on every answer even where bfloat16's rounding differs between their passes."""

from __future__ import annotations

import pytest

from aisql.engine import EngineOptions, ScoreRequest, load_engine
from aisql.engine.base import LabelScores
from aisql.engine.model.tie_confirmation import DEFAULT_MARGIN, TieConfirmation, margin_from_calibration


class FakeReference:
    def __init__(self) -> None:
        self.asked: list[list[ScoreRequest]] = []

    def score(self, requests, reuse=True):
        self.asked.append((list(requests), reuse))
        return [LabelScores((-9.0, -0.1)) for _ in requests]


def test_only_near_ties_are_scored_again_as_the_run_asks_and_long_labels_widen_the_margin():
    reference = FakeReference()
    confirm = TieConfirmation(0.2, lambda: reference)
    one, two = ((1,), (2,)), ((1, 5, 6), (2,))
    requests = [ScoreRequest((9, 9), one), ScoreRequest((9, 8), one), ScoreRequest((9, 7), two)]
    results = [LabelScores((-0.6, -0.7)), LabelScores((-0.1, -3.0)), LabelScores((-0.6, -1.0))]
    assert confirm.confirm(requests, results) == 2  # the third: gap 0.4 < 0.2 x 3 tokens
    assert [(len(call), reuse) for call, reuse in reference.asked] == [(2, True)]  # a planned run's: batched, prefix cache
    assert results[0] == results[2] == LabelScores((-9.0, -0.1)) and results[1] == LabelScores((-0.1, -3.0))
    reference.asked.clear()
    results = [LabelScores((-0.6, -0.7)), LabelScores((-0.1, -3.0)), LabelScores((-0.6, -1.0))]
    assert confirm.confirm(requests, results, reuse=False) == 2
    assert [(len(call), reuse) for call, reuse in reference.asked] == [(1, False), (1, False)]  # a naive run's: alone


def test_the_reference_loads_only_when_a_tie_needs_it():
    loads = []
    confirm = TieConfirmation(0.1, lambda: loads.append(1) or FakeReference())
    assert confirm.confirm([ScoreRequest((1,), ((1,), (2,)))], [LabelScores((-0.1, -5.0))]) == 0
    assert loads == [] and confirm.reference_stats() == 0


def test_the_margin_follows_the_calibration():
    assert margin_from_calibration(None) == DEFAULT_MARGIN
    assert margin_from_calibration(0.12) == pytest.approx(0.24)
    assert margin_from_calibration(0.001) == 0.1  # never below MIN_MARGIN


def test_a_bfloat16_cpu_engine_answers_planned_and_naive_alike():
    engine = load_engine("tiny", EngineOptions(dtype="bfloat16"))
    assert engine.info.dtype == "bfloat16" and engine.tie_confirmation is not None
    engine.tie_confirmation.margin = 1e9  # every answer a "near tie": all of them decided in float32
    labels = (engine.encode_label("TRUE"), engine.encode_label("FALSE"))
    prompts = engine.encode_prompts("Answer.", [f"Customer {i % 5} may buy product {i}." for i in range(16)])
    requests = [ScoreRequest(tuple(p), labels) for p in prompts]
    planned = engine.score(requests)
    naive = [engine.score([r], reuse=False)[0] for r in requests]
    assert [s.best for s in planned] == [s.best for s in naive]
    assert max(abs(x - y) for a, b in zip(planned, naive) for x, y in zip(a.logprobs, b.logprobs)) < 1e-4  # float32's noise
    assert engine.stats.tie_confirmed_prompts == 32 and engine.stats.tie_confirmed_tokens > 0
    float32 = load_engine("tiny", EngineOptions(dtype="float32"))
    assert float32.tie_confirmation is None
    assert naive == [float32.score([r], reuse=False)[0] for r in requests]  # a naive run's confirmation: float32, alone


def test_generation_on_a_bfloat16_cpu_engine_runs_in_float32_and_is_counted():
    from aisql.engine import GenerateRequest

    engine = load_engine("tiny", EngineOptions(dtype="bfloat16"))
    float32 = load_engine("tiny", EngineOptions(dtype="float32"))
    prompts = engine.encode_prompts("Describe.", [f"Product {i} is a kettle." for i in range(6)])
    requests = [GenerateRequest(tuple(p), max_tokens=6) for p in prompts]
    before = engine.stats.generated_tokens
    planned = engine.generate(requests)
    naive = [engine.generate([r], reuse=False)[0] for r in requests]
    assert [g.token_ids for g in planned] == [g.token_ids for g in naive] == [g.token_ids for g in float32.generate(requests)]
    assert engine.stats.generated_tokens - before == 2 * sum(len(g.token_ids) for g in planned)
