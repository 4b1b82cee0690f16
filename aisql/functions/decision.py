"""How a scored answer's label probabilities become its SQL value: the decision rule.

One forward pass gives every label's log-probability; the rule picks the value. The function's
own rule is the likeliest label (AI.SCORE: the expectation over the scale). A `Decision` replaces
it where the user asks:
- `min_confidence` (AI.IF): TRUE where P(Yes) among Yes/No is at least the threshold;
- labelled examples (`examples => ...`): a threshold (AI.IF), per-label offsets (AI.CLASSIFY) or a
  monotone map of the expectation onto the examples' scale (AI.SCORE), fitted on the examples'
  own probabilities — the examples are more prompts of the same task — and kept only if it
  beats the function's own rule on examples held out one at a time (leave-one-out);
- a label-free calibration (`{'calibration': 'content_free' | 'batch'}`): each label's
  probability divided by its mean over content-free inputs (Zhao et al., ICML 2021) or over the
  node's own distinct prompts (Zhou et al., ICLR 2024). For a yes/no both are a threshold:
  p / a >= (1 - p) / (1 - a)  <=>  p >= a, with `a` the mean P(Yes).

The rule is applied on read — to answers from the engine and from the result cache alike — so
the cache keeps raw probabilities, a changed rule costs no model time, and planned == naive.
Everything here is arithmetic on probabilities: no model, no SQL.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

SOURCES = ("min_confidence", "examples", "content_free", "batch")
CALIBRATIONS = ("none", "content_free", "batch")
# Content-free inputs (Zhao et al. 2021), each put in every placeholder of the prompt.
CONTENT_FREE_INPUTS = ("N/A", "", "[MASK]")
MAX_EXAMPLES = 1_000  # labelled examples per call (each is a prompt the model answers)


@dataclass(frozen=True)
class Decision:
    """A rule from label log-probabilities to a value, in place of the function's own."""

    source: str  # what made it: one of SOURCES
    threshold: float | None = None  # yes/no: TRUE when P(Yes) >= threshold
    offsets: tuple[float, ...] | None = None  # added to each label's log-probability first (CLASSIFY, SCORE)
    points: tuple[tuple[float, float], ...] | None = None  # SCORE: the expectation's monotone map, as (x, y) knots

    def describe(self) -> str:
        if self.threshold is not None:
            return f"P(Yes) >= {self.threshold:.3g}"
        if self.points is not None:
            return "score mapped by " + ", ".join(f"{x:.2f}->{y:.2f}" for x, y in self.points)
        if self.offsets is not None:
            return "label offsets " + ", ".join(f"{o:+.2f}" for o in self.offsets)
        return "the likeliest label"


# ---- arithmetic on label probabilities --------------------------------------------------------
def normalized(logprobs: Sequence[float]) -> list[float]:
    """The labels' probabilities, renormalised over the labels."""
    top = max(logprobs)
    weights = [math.exp(lp - top) for lp in logprobs]
    total = math.fsum(weights)
    return [w / total for w in weights]


def p_yes(logprobs: Sequence[float]) -> float:
    """P(Yes) among Yes and No (labels in that order)."""
    return 1.0 / (1.0 + math.exp(max(-700.0, min(700.0, logprobs[1] - logprobs[0]))))


def logit(p: float) -> float:
    p = min(max(p, 1e-12), 1 - 1e-12)
    return math.log(p / (1 - p))


def shifted(logprobs: Sequence[float], offsets: Sequence[float] | None) -> list[float]:
    return list(logprobs) if offsets is None else [lp + o for lp, o in zip(logprobs, offsets)]


def argmax(values: Sequence[float]) -> int:
    """Index of the largest value (the first one on an exact tie)."""
    return max(range(len(values)), key=values.__getitem__)


def interpolate(points: Sequence[tuple[float, float]], x: float) -> float:
    """A piecewise-linear monotone map through `points` (sorted by x), flat beyond its ends."""
    if x <= points[0][0]:
        return points[0][1]
    if x >= points[-1][0]:
        return points[-1][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]


# ---- label-free calibrations ----------------------------------------------------------------------
def calibration_offsets(rows: Sequence[Sequence[float]]) -> tuple[float, ...]:
    """Offsets dividing each label's probability by its mean over `rows` (label log-probabilities)."""
    probabilities = [normalized(r) for r in rows]
    means = [math.fsum(p[k] for p in probabilities) / len(probabilities) for k in range(len(rows[0]))]
    return tuple(-math.log(max(m, 1e-300)) for m in means)


def calibration_threshold(rows: Sequence[Sequence[float]]) -> float:
    """A yes/no's calibration as a threshold: the mean P(Yes) over `rows`."""
    return math.fsum(p_yes(r) for r in rows) / len(rows)


# ---- fitted on labelled examples --------------------------------------------------------------
def balanced_accuracy(predicted: Sequence, truth: Sequence) -> float:
    """Mean recall over the classes present in `truth` (plain accuracy rewards the majority)."""
    classes = sorted(set(truth), key=repr)
    recalls = []
    for c in classes:
        rows = [p for p, t in zip(predicted, truth) if t == c]
        recalls.append(sum(p == c for p in rows) / len(rows))
    return math.fsum(recalls) / len(recalls)


def fit_threshold(p: Sequence[float], truth: Sequence[bool]) -> float:
    """The P(Yes) threshold that best separates labelled examples (balanced accuracy); of equally
    good cuts, the middle one (in log-odds) of the best run. See benchmarks/RESULTS.md §27 for the
    rules measured against it."""
    scored = sorted(zip((logit(x) for x in p), truth))
    positives = sum(truth)
    negatives = len(truth) - positives
    if not positives or not negatives:
        raise ValueError("examples of both answers are needed")
    # cut i: everything from scored[i] upwards is Yes
    best, cuts = -1.0, []
    yes_below = no_below = 0
    for i in range(len(scored) + 1):
        if i == 0 or scored[i - 1][0] != (scored[i][0] if i < len(scored) else None):
            value = (positives - yes_below) / positives / 2 + no_below / negatives / 2
            if value > best + 1e-12:
                best, cuts = value, [i]
            elif value > best - 1e-12:
                cuts.append(i)
        if i < len(scored):
            yes_below += scored[i][1]
            no_below += not scored[i][1]
    middle = cuts[(len(cuts) - 1) // 2] if len(cuts) % 2 else None
    if middle is None:  # an even number of best cuts: halfway between the two middle ones
        a, b = cuts[len(cuts) // 2 - 1], cuts[len(cuts) // 2]
        return _sigmoid((_cut_logit(scored, a) + _cut_logit(scored, b)) / 2)
    return _sigmoid(_cut_logit(scored, middle))


def _cut_logit(scored: list[tuple[float, bool]], i: int) -> float:
    """The log-odds of cut i: halfway between the examples either side (one unit past the ends)."""
    if i == 0:
        return scored[0][0] - 1.0
    if i == len(scored):
        return scored[-1][0] + 1.0
    return (scored[i - 1][0] + scored[i][0]) / 2


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(max(-700.0, min(700.0, -x))))


def fit_offsets(rows: Sequence[Sequence[float]], truth: Sequence[int], rounds: int = 4) -> tuple[float, ...]:
    """Per-label offsets to the log-probabilities that best classify labelled examples (balanced
    accuracy), by coordinate ascent from zero: each label's offset in turn set to the middle of
    its best interval among the points where an example's answer changes."""
    labels = len(rows[0])
    offsets = [0.0] * labels

    def score(candidate: list[float]) -> float:
        return balanced_accuracy([argmax(shifted(r, candidate)) for r in rows], truth)

    current = score(offsets)
    for _ in range(rounds):
        improved = False
        for k in range(labels):
            # where example r's answer switches to or from label k: its margin against the best other label
            margins = sorted({max(lp + o for j, (lp, o) in enumerate(zip(r, offsets)) if j != k) - r[k] for r in rows})
            candidates = [margins[0] - 1.0] + [(a + b) / 2 for a, b in zip(margins, margins[1:])] + [margins[-1] + 1.0]
            values = []
            for c in candidates:
                trial = offsets[:k] + [c] + offsets[k + 1 :]
                values.append((score(trial), -abs(c), c))
            best_value = max(v[0] for v in values)
            if best_value > current + 1e-12:
                # of the best, the offset nearest zero: the smallest change to the model's own answers
                offsets[k] = max(v for v in values if v[0] >= best_value - 1e-12)[2]
                current = best_value
                improved = True
        if not improved:
            break
    return tuple(offsets)


def fit_monotone(x: Sequence[float], y: Sequence[float]) -> tuple[tuple[float, float], ...]:
    """Isotonic regression (pool adjacent violators) of y on x, as knots of a piecewise-linear
    map: each pooled block's mean x and mean y."""
    blocks: list[list[float]] = []  # [sum x, sum y, count]
    for xi, yi in sorted(zip(x, y)):
        blocks.append([xi, yi, 1])
        while len(blocks) > 1 and blocks[-2][1] / blocks[-2][2] >= blocks[-1][1] / blocks[-1][2]:
            top = blocks.pop()
            blocks[-1] = [blocks[-1][0] + top[0], blocks[-1][1] + top[1], blocks[-1][2] + top[2]]
    return tuple((sx / n, sy / n) for sx, sy, n in blocks)


def leave_one_out(count: int, fit_and_predict: Callable[[list[int], int], object]) -> list:
    """Each example's prediction by a rule fitted on the others (`fit_and_predict(train, held)`)."""
    everyone = list(range(count))
    return [fit_and_predict(everyone[:i] + everyone[i + 1 :], i) for i in everyone]
