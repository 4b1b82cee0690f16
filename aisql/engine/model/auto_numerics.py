"""`--dtype auto` on a CPU: the fastest numerics whose answers agree with float32, by measurement.

Which numerics are fastest is a fact of the CPU, not a constant: on a CPU with native bfloat16
(AVX512-BF16, AMX) a bf16 forward of Qwen2.5-0.5B costs 2.7x fewer CPU seconds than float32 with
the same answers; on one without, bf16 is emulated and slower (RESULTS §4: 0.73x). So the first
time a model runs on a kind of CPU whose flags allow a faster candidate, aisql answers the 160
yes/no questions of `numerics_calibration.json` (short ones and review-length ones: bf16's error
grows with the prompt) in float32 and in each candidate, and keeps the
fastest candidate that gives the same answers on >= 98% of them — observed, and projected from its
margin noise (`projected_agreement`) — and loses at most one point of accuracy against their
labels; else float32. The decision is kept in the cache per model and CPU
kind and read back without torch (CPU flags come from the OS), because the dtype is part of the
result cache's key and a fully cached rerun must not import torch.

int8 is not a candidate: dynamic int8 matmuls (per-channel weight scales, activations quantized
per batch) agreed with float32 on 85 of 100 reviews on Qwen2.5-0.5B — measured, not right yet.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import platform
import time
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Callable

from aisql.paths import cache_root, save_cache_file

MIN_AGREEMENT = 0.98  # answers equal to float32's, on the calibration questions
MAX_ACCURACY_LOSS = 0.01  # against their labels: one point
MIN_SPEEDUP = 1.15  # less than this is not worth leaving float32 for
DECISION_VERSION = 6  # 6: the largest margin change kept (bfloat16 tie margin); 2: AI.IF's framing; 3: review-length questions; 4: projected agreement; 5: each numerics on its measured linear kernel
_BF16_FLAGS = {"avx512_bf16", "amx_bf16"}  # x86: native bf16 dot products
_ARM_BF16_FLAGS = {"bf16"}  # aarch64 /proc/cpuinfo "Features"


@dataclass(frozen=True)
class CpuKind:
    """What of a CPU decides its fastest numerics, read from the OS without torch."""

    model: str
    machine: str
    flags: frozenset[str]

    @property
    def native_bf16(self) -> bool:
        wanted = _ARM_BF16_FLAGS if self.machine in ("aarch64", "arm64") else _BF16_FLAGS
        return bool(self.flags & wanted)

    @property
    def key(self) -> str:
        relevant = sorted(self.flags & (_BF16_FLAGS | _ARM_BF16_FLAGS | {"avx512f", "avx2", "avx512_vnni", "avx_vnni", "amx_int8", "i8mm"}))
        return hashlib.sha256(f"{self.machine}|{self.model}|{','.join(relevant)}".encode()).hexdigest()[:12]

    def describe(self) -> str:
        return f"{self.model or self.machine} ({'native bf16' if self.native_bf16 else 'no native bf16'})"


def cpu_kind() -> CpuKind:
    model, flags = "", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            name, _, value = line.partition(":")
            name = name.strip()
            if name == "model name" and not model:
                model = value.strip()
            elif name in ("flags", "Features") and not flags:
                flags = set(value.split())
    except OSError:
        pass
    return CpuKind(model or platform.processor(), platform.machine(), frozenset(flags))


@dataclass
class Trial:
    """One dtype's run over the calibration questions."""

    dtype: str
    cpu_s: float
    tokens: int
    answers: list[bool] = field(repr=False)
    margins: list[float] = field(default_factory=list, repr=False)  # log P(yes) - log P(no), per question
    agreement: float = 1.0  # with float32's answers
    accuracy: float = 0.0  # against the labels

    @property
    def tokens_per_cpu_s(self) -> float:
        return self.tokens / self.cpu_s if self.cpu_s > 0 else 0.0


@dataclass
class Decision:
    dtype: str
    reason: str
    cpu: str
    trials: list[dict] = field(default_factory=list)


def calibration_questions() -> list[tuple[str, bool]]:
    text = resources.files("aisql.engine.model").joinpath("numerics_calibration.json").read_text(encoding="utf-8")
    return [(question, bool(answer)) for question, answer in json.loads(text)["questions"]]


def trial_tokens() -> int:
    """About how many tokens the trial runs per number format (its questions, ~4 characters a
    token, and each prompt's framing): what explain prices it at before a run measures it."""
    return sum(len(question) // 4 + 24 for question, _ in calibration_questions())


def decision_path(model_key: str, kind: CpuKind | None = None) -> Path:
    kind = kind or cpu_kind()
    safe = hashlib.sha256(model_key.encode()).hexdigest()[:16]
    return cache_root() / "numerics" / f"{safe}-cpu-{kind.key}-v{DECISION_VERSION}.json"


def remembered(model_key: str) -> Decision | None:
    try:
        data = json.loads(decision_path(model_key).read_text())
        return Decision(**data)
    except (OSError, ValueError, TypeError):
        return None


def settled_cpu_dtype(model_key: str) -> str | None:
    """The dtype `auto` means for this model on this CPU when no measurement is needed: the
    remembered decision, or float32 where the CPU has no faster candidate. None: measure first."""
    decision = remembered(model_key)
    if decision is not None:
        return decision.dtype
    return None if cpu_kind().native_bf16 else "float32"


def decide(model_key: str, run_trial: Callable[[str], Trial], notify: Callable[[str], None] | None = None) -> Decision:
    """Measure float32 and bfloat16 with `run_trial` (answers the calibration questions in one
    dtype) and remember the choice."""
    kind = cpu_kind()
    say = notify or (lambda line: None)
    say(
        f"note: first run of this model on this CPU ({kind.describe()}): answering {len(calibration_questions())} short yes/no "
        "questions in full precision (float32) and in half precision (bfloat16) to keep the faster one only if it gives "
        "the same answers; done once, remembered for every later run (--dtype float32 skips it)"
    )
    started = time.perf_counter()
    labels = [answer for _, answer in calibration_questions()]
    reference = run_trial("float32")
    reference.accuracy = _accuracy(reference.answers, labels)
    candidate = run_trial("bfloat16")
    candidate.agreement = sum(a == b for a, b in zip(candidate.answers, reference.answers)) / len(labels)
    candidate.accuracy = _accuracy(candidate.answers, labels)
    speedup = reference.cpu_s / candidate.cpu_s if candidate.cpu_s > 0 else 0.0
    projected = projected_agreement(reference.margins, candidate.margins)
    if candidate.agreement < MIN_AGREEMENT:
        dtype, reason = "float32", f"bfloat16 agreed with float32 on {candidate.agreement:.0%} of answers (< {MIN_AGREEMENT:.0%})"
    elif projected < MIN_AGREEMENT:
        dtype, reason = "float32", (
            f"bfloat16 agreed on {candidate.agreement:.1%} of answers, but its margin noise against float32's margins "
            f"projects {projected:.1%} (< {MIN_AGREEMENT:.0%})"
        )
    elif round((reference.accuracy - candidate.accuracy) * len(labels)) > max(1, int(MAX_ACCURACY_LOSS * len(labels))):
        dtype, reason = "float32", f"bfloat16 lost accuracy ({candidate.accuracy:.0%} vs {reference.accuracy:.0%})"
    elif speedup < MIN_SPEEDUP:
        dtype, reason = "float32", f"bfloat16 was only {speedup:.2f}x as fast per CPU second"
    else:
        dtype, reason = "bfloat16", f"bfloat16: {speedup:.2f}x fewer CPU seconds, {candidate.agreement:.0%} of answers equal to float32's"
    changes = sorted(abs(a - b) for a, b in zip(candidate.margins, reference.margins))
    decision = Decision(
        dtype, reason, kind.describe(),
        [
            {k: v for k, v in asdict(t).items() if k not in ("answers", "margins")} | {"tokens_per_cpu_s": round(t.tokens_per_cpu_s, 1)}
            for t in (reference, candidate)
        ],
    )
    if changes:  # how far the candidate moves a yes/no margin: what decides flips on harder inputs
        decision.trials[1]["median_margin_change"] = round(changes[len(changes) // 2], 4)
        decision.trials[1]["max_margin_change"] = round(changes[-1], 4)  # sets the float32 tie margin (tie_confirmation)
        decision.trials[1]["projected_agreement"] = round(projected, 4)
    save_cache_file(decision_path(model_key, kind), json.dumps(asdict(decision), indent=2))
    say(f"note: number format chosen in {time.perf_counter() - started:.0f} s: {dtype} ({reason})")
    return decision


def projected_agreement(reference: list[float], candidate: list[float]) -> float:
    """The share of answers expected to stay the same under the candidate's margin noise: each
    question's float32 margin |m| flips with the probability that a noise draw |d| (the observed
    changes, all questions) exceeds it. The observed flip count is one draw of this; a model unsure
    of many answers (small margins) is caught even when that draw was lucky — SmolLM2 on these
    questions: 3 flips of 160 observed (98.1%), 95.5% projected; on 150 real reviews, 96.7%."""
    if not reference or len(reference) != len(candidate):
        return 1.0
    noise = sorted(abs(a - b) for a, b in zip(reference, candidate))
    count = len(noise)
    expected_flips = sum((count - bisect.bisect_right(noise, abs(m))) / count for m in reference)
    return 1.0 - expected_flips / count


def _accuracy(answers: list[bool], labels: list[bool]) -> float:
    return sum(a == b for a, b in zip(answers, labels)) / len(labels)


def process_cpu_seconds() -> float:
    """CPU time of this process, all threads (what a shared machine charges for)."""
    return time.process_time()


