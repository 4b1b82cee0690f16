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
from typing import TYPE_CHECKING, Callable, Sequence

if TYPE_CHECKING:
    from aisql.functions.probe import Probe

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
    # Decides from the prompt's hidden state instead of the label probabilities (aisql.functions.probe).
    probe: "Probe | None" = None
    # Labelled examples on an engine that sees hidden states: every prompt's state is kept (in the
    # answer and the result cache), so other examples, or a probe, ask the model nothing again.
    keep_states: bool = False
    # The examples themselves, asked to fit the rule: their states are read back, and a cached
    # answer without one is asked again (where keep_states).
    fitting: bool = False

    @property
    def needs_states(self) -> bool:
        """An answer without a hidden state cannot be read under this rule (asked again)."""
        return self.probe is not None or (self.fitting and self.keep_states)

    def describe(self) -> str:
        if self.probe is not None:
            return self.probe.describe()
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


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (ties: average ranks); 0 where either side is constant."""
    import numpy as np
    from scipy.stats import rankdata

    if len(x) < 2:
        return 0.0
    a, b = rankdata(np.asarray(x, dtype=float)), rankdata(np.asarray(y, dtype=float))
    if a.std() == 0 or b.std() == 0:
        return 0.0
    return float(np.corrcoef(a, b)[0, 1])


def f1(predicted: Sequence[bool], truth: Sequence[bool]) -> float:
    """F1 of the positive class (0 where nothing is predicted or true)."""
    tp = sum(1 for p, t in zip(predicted, truth) if p and t)
    fp = sum(1 for p, t in zip(predicted, truth) if p and not t)
    fn = sum(1 for p, t in zip(predicted, truth) if t and not p)
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def fit_bias(rows: Sequence[Sequence[float]], truth: Sequence[int], l2: float = 0.05, steps: int = 50) -> tuple[float, ...]:
    """Per-label offsets by logistic regression with only a bias per label (the model's own
    log-probabilities as the fixed input, every class weighing the same, a little L2 toward no
    change): the smallest smooth correction that makes the examples' labels likely. Newton's
    method; a handful of examples is enough to fit one number per label."""
    import numpy as np

    x = np.array([normalized(r) for r in rows])
    x = np.log(np.clip(x, 1e-300, 1.0))
    labels = x.shape[1]
    y = np.zeros_like(x)
    y[np.arange(len(truth)), truth] = 1.0
    counts = y.sum(axis=0)
    present = counts > 0
    w = (y / np.where(present, counts, 1.0)).sum(axis=1) / present.sum()  # each present class weighs 1 / classes
    b = np.zeros(labels)
    for _ in range(steps):
        z = x + b
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        gradient = (w[:, None] * (p - y)).sum(axis=0) + l2 * b
        hessian = np.einsum("i,ij,ik->jk", w, p, p) * -1.0 + np.diag((w[:, None] * p).sum(axis=0)) + l2 * np.eye(labels)
        step = np.linalg.solve(hessian, gradient)
        b -= step
        if float(np.abs(step).max()) < 1e-10:
            break
    b -= b.mean()
    return tuple(float(v) for v in b)


def bias_probabilities(rows: Sequence[Sequence[float]], offsets: Sequence[float]):
    """Each label's probability under fitted offsets (`fit_bias`): the model's own, renormalised
    over the labels and shifted ([rows, labels])."""
    import numpy as np

    x = np.log(np.clip(np.array([normalized(r) for r in rows]), 1e-300, 1.0)) + np.asarray(offsets)
    x -= x.max(axis=1, keepdims=True)
    p = np.exp(x)
    return p / p.sum(axis=1, keepdims=True)


def balanced_log_loss(probabilities, truth: Sequence[int]) -> float:
    """Mean over the classes present of the mean -log P(true label) (each at least 1e-6): a
    proper score, far less noisy than accuracy on a few examples, every class weighing the same."""
    import numpy as np

    truth = np.asarray(truth)
    p = np.clip(np.asarray(probabilities)[np.arange(len(truth)), truth], 1e-6, 1.0)
    return float(np.mean([-np.log(p[truth == c]).mean() for c in np.unique(truth)]))


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
