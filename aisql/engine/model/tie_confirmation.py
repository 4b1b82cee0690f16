"""Near ties answered in float32: what keeps planned == naive when the engine computes in bfloat16.

bfloat16 keeps 8 bits of mantissa. Planned and naive runs compute the same prompt in different
passes (a cached prefix and a short suffix, or the whole prompt alone), so their bfloat16 label
scores differ by rounding, and an answer whose two best labels are nearly tied can come out
differently (measured: 1 of 100 GGR pdmx rows with Qwen2.5-0.5B). float32's rounding between the
two paths is ~1e-6, far below any real margin.

So a reduced-precision engine confirms its near ties: a request whose best two label
log-probabilities are closer than `margin` is scored again by the same weights in float32, and
that score is its answer. The float32 engine runs the way the asking run does — a planned run's
near ties with its own prefix cache, a naive run's prompt alone — and float32's planned and naive
scores agree to ~1e-6 (the engine's float32 invariant), so the confirmations agree. With `margin`
above the largest bfloat16-vs-float32 margin change, a planned and a naive run then agree on every
answer: a tie confirmed in one run and not in the other was decided the same way by float32 in one
and by a bfloat16 margin wider than its error in the other. The
margin comes from `--dtype auto`'s calibration (twice the largest change it measured on its 160
questions, scaled by label length), else DEFAULT_MARGIN. The float32 copy is loaded on the first
near tie; the count of confirmed prompts is in the engine's stats.
"""

from __future__ import annotations

import threading
from typing import Callable, Sequence

from aisql.engine.base import LabelScores, ScoreRequest

DEFAULT_MARGIN = 0.5  # nats; bfloat16 moved a yes/no margin by at most ~0.2 in the calibrations measured here
SAFETY = 2.0  # the margin is this multiple of the largest change a calibration observed
MIN_MARGIN = 0.1


def margin_from_calibration(max_change: float | None) -> float:
    """The tie margin for a model whose calibration saw bfloat16 move a margin by at most `max_change`."""
    if max_change is None:
        return DEFAULT_MARGIN
    return max(MIN_MARGIN, SAFETY * max_change)


class TieConfirmation:
    """Rescores near ties of a reduced-precision engine with a float32 engine of the same weights."""

    def __init__(self, margin: float, load_reference: Callable[[], object]) -> None:
        self.margin = margin
        self._load_reference = load_reference
        self._reference = None
        self._lock = threading.Lock()

    def reference(self):
        with self._lock:
            if self._reference is None:
                self._reference = self._load_reference()
            return self._reference

    def reset_cache(self) -> None:
        if self._reference is not None:
            self._reference.reset_cache()

    def reference_stats(self) -> int:
        """Tokens the float32 engine has computed so far (0 before it is loaded)."""
        return self._reference.stats.computed_tokens if self._reference is not None else 0

    def is_near_tie(self, request: ScoreRequest, scores: LabelScores) -> bool:
        if len(scores.logprobs) < 2:
            return False
        first, second = sorted(scores.logprobs, reverse=True)[:2]
        longest = max((len(label) for label in request.label_ids), default=1)
        return first - second < self.margin * longest  # a label of n tokens sums n rounded log-probabilities

    def confirm(self, requests: Sequence[ScoreRequest], results: list[LabelScores], reuse: bool = True) -> int:
        """Replace the near ties' scores by float32's (with the float32 engine's prefix cache when
        `reuse`, else each prompt alone, as the asking run computes); returns how many."""
        near = [i for i, (request, scores) in enumerate(zip(requests, results)) if self.is_near_tie(request, scores)]
        if not near:
            return 0
        reference = self.reference()
        if reuse:
            for i, scores in zip(near, reference.score([requests[i] for i in near])):
                results[i] = scores
        else:
            for i in near:
                (results[i],) = reference.score([requests[i]], reuse=False)
        return len(near)
