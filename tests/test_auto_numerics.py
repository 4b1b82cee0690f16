"""`--dtype auto` on a CPU: chosen by measurement once per model and CPU kind, remembered, and
read back without torch (aisql.engine.model.auto_numerics)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from aisql.engine.model import auto_numerics
from aisql.engine.model.auto_numerics import CpuKind, Trial, calibration_questions, decide, settled_cpu_dtype

LABELS = [answer for _, answer in calibration_questions()]


def trial(dtype: str, cpu_s: float, flips: int = 0, wrong: int = 0) -> Trial:
    """A trial answering like the labels, with the first `wrong` answers wrong and then `flips`
    more answers flipped (flips change agreement with a label-perfect float32, and accuracy)."""
    answers = list(LABELS)
    for i in range(wrong + flips):
        answers[i] = not answers[i]
    return Trial(dtype, cpu_s, 1000, answers)


@pytest.fixture
def bf16_cpu(monkeypatch):
    kind = CpuKind("Test CPU", "x86_64", frozenset({"avx512f", "avx512_bf16"}))
    monkeypatch.setattr(auto_numerics, "cpu_kind", lambda: kind)
    return kind


def test_the_calibration_set_is_balanced_and_large_enough_for_98_percent():
    assert len(LABELS) >= 150 and sum(LABELS) == len(LABELS) // 2
    assert sum(len(q) > 200 for q, _ in calibration_questions()) >= 50  # review-length texts too
    assert len({q for q, _ in calibration_questions()}) == len(LABELS)  # no repeats


@pytest.mark.parametrize(
    ("candidate", "chosen", "why"),
    [
        (trial("bfloat16", 1.0, wrong=4), "bfloat16", "fewer CPU seconds"),
        (trial("bfloat16", 1.0, wrong=1), "bfloat16", "fewer CPU seconds"),  # 3 answers differ of 160: 98.1% >= 98%
        (trial("bfloat16", 1.0, wrong=0), "float32", "agreed with float32 on"),  # 4 differ: 97.5% < 98%
        (trial("bfloat16", 2.9, wrong=4), "float32", "only 1.03x"),
    ],
)
def test_the_fastest_dtype_that_agrees_is_chosen_and_remembered(bf16_cpu, candidate, chosen, why):
    reference = trial("float32", 3.0, wrong=4)  # differences from it are gains in accuracy: only agreement decides
    ran = []

    def run(dtype):
        ran.append(dtype)
        return reference if dtype == "float32" else candidate

    decision = decide("model-a", run)
    assert ran == ["float32", "bfloat16"]
    assert decision.dtype == chosen and why in decision.reason
    assert settled_cpu_dtype("model-a") == chosen  # remembered: no second measurement
    assert settled_cpu_dtype("model-b") is None  # per model


def test_accuracy_loss_beyond_one_point_keeps_float32(bf16_cpu):
    reference = trial("float32", 3.0, wrong=0)
    # agreement 98.75% (2 flips of 160) but both lose a right answer: two questions, more than one point
    decision = decide("model-c", lambda dtype: reference if dtype == "float32" else trial("bfloat16", 1.0, flips=2))
    assert decision.dtype == "float32" and "lost accuracy" in decision.reason


def test_a_cpu_without_native_bf16_needs_no_measurement(monkeypatch):
    monkeypatch.setattr(auto_numerics, "cpu_kind", lambda: CpuKind("Old CPU", "x86_64", frozenset({"avx2", "fma"})))
    assert settled_cpu_dtype("never-measured") == "float32"


def test_cpu_flags_come_from_the_os_and_a_settled_choice_needs_no_torch(bf16_cpu, tmp_path):
    decide("model-d", lambda dtype: trial(dtype, 3.0 if dtype == "float32" else 1.0))
    code = (
        "import sys; from aisql.engine.model.auto_numerics import cpu_kind, remembered;"
        "k = cpu_kind(); print(k.machine, bool(k.flags)); assert 'torch' not in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert auto_numerics.remembered("model-d").dtype == "bfloat16"


def test_the_test_model_and_quantized_weights_stay_float32(tmp_path):
    from aisql.engine.model.resolving import resolved_dtype_name
    from aisql.engine.options import EngineOptions

    never = lambda: pytest.fail("measured")  # noqa: E731
    assert resolved_dtype_name(EngineOptions(), "cpu", "tiny-id", never, is_test=True) == "float32"
    assert resolved_dtype_name(EngineOptions(quantize="int8"), "cpu", "any-id", never) == "float32"
    assert resolved_dtype_name(EngineOptions(dtype="bfloat16"), "cpu", "any-id", never) == "bfloat16"


def test_a_model_unsure_of_many_answers_keeps_float32_even_on_a_lucky_draw(bf16_cpu):
    """No answer flipped, but half the questions have margins smaller than the noise bf16 puts on
    the other half: the projected agreement (75%) says a workload like it would flip many."""
    half = len(LABELS) // 2
    sure, unsure = [1.0] * half, [0.01] * (len(LABELS) - half)
    reference = Trial("float32", 3.0, 1000, list(LABELS), margins=sure + unsure)
    candidate = Trial("bfloat16", 1.0, 1000, list(LABELS), margins=[m + 0.02 for m in sure] + [m + 0.001 for m in unsure])
    decision = decide("model-e", lambda dtype: reference if dtype == "float32" else candidate)
    assert decision.dtype == "float32" and "projects 75.0%" in decision.reason
    assert auto_numerics.projected_agreement([2.0, -3.0], [2.01, -2.98]) == 1.0  # noise far below every margin


def test_explain_never_measures_and_a_run_measures_once(bf16_cpu, monkeypatch, tmp_path):
    """explain reads only a settled choice; the first run measures, then the run's answers and
    its summary carry the chosen numerics."""
    import aisql
    from aisql.engine.model.tiny import tiny_model_dir

    monkeypatch.setenv("AISQL_CACHE_DIR", str(tmp_path))  # nothing decided yet
    model = str(tiny_model_dir())  # by path: not the test model, so `auto` is measured
    sql = "SELECT AI.IF(PROMPT('Is {0} a fruit?', x)) AS y FROM (VALUES ('apple'), ('stone')) v(x)"
    measured = []
    real_decide = auto_numerics.decide

    def counting(key, run_trial, notify=None):
        measured.append(key)
        return real_decide(key, lambda dtype: trial(dtype, 3.0 if dtype == "float32" else 1.0), notify)

    monkeypatch.setattr(auto_numerics, "decide", counting)
    aisql.connect(model=model, cache=False).explain(sql)
    assert measured == []
    con = aisql.connect(model=model, cache=False)
    result = con.run(sql)
    assert len(measured) == 1 and result.stats.numerics == "bfloat16"
    con.run(sql)
    assert len(measured) == 1  # remembered
