"""Probes: a linear model on the model's own reading of a row, fitted on labelled examples.

A small model often reads a row well while its one answer token answers badly: the scoring pass
ends in a hidden state (the vector the output head turns into P(Yes)) that separates the classes
far better than the one number the head keeps. With labelled examples, a regularised linear
model on that state — logistic regression for AI.IF and AI.CLASSIFY, ridge regression for
AI.SCORE — turns the reading into answers (RESULTS.md §34: e.g. +0.19 balanced accuracy over the
threshold on P(Yes) for SmolLM2 on GGR beer at 16 examples).

Choices, each measured across the labelled tasks x three models (benchmarks/probes.py):
- features standardised by the examples' own mean and spread (the states' dimensions differ in
  scale by orders of magnitude; the unlabelled rows are not used, so an answer does not depend
  on which rows reach the call);
- one fixed regularisation strength, every class weighing the same (`class_weight='balanced'`):
  choosing it by an inner cross-validation was no better on average and noisier at 16 examples;
- the probe is chosen over the label-probability rule (aisql.functions.decision) only when its
  cross-validated quality on the examples is clearly better (`choose`): a probe fitted on 16 rows
  of a task the model's P(Yes) already answers well loses a little to the simpler rule.

The standardisation is folded into the weights, so applying a probe is one dot product per class
on the stored float16 state (aisql.functions.hidden_states): deterministic, the same for a fresh
and a cached answer, for planned and naive runs. scikit-learn does the fitting (a core
dependency: ~40 MB with SciPy, a well-kept implementation of exactly these fits).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from aisql.functions.hidden_states import unpack_states

CLASSES = "classes"  # logistic regression: a label index (AI.IF, AI.CLASSIFY)
NUMBER = "number"  # ridge regression: a value on the scale (AI.SCORE)
C = 0.1  # logistic regression's inverse regularisation on standardised states (benchmarks/probes.py)
RIDGE_ALPHA = 10.0  # ridge's regularisation on standardised states, per example (benchmarks/probes.py)
MIN_SPREAD = 1e-3  # a dimension's spread below this is treated as this (a constant dimension adds nothing)
FOLDS = 5  # cross-validation folds (fewer where a class has fewer examples)
BOOTSTRAP = 1000  # resamples of the examples for an interval
SEED = 0  # every random choice here is seeded: the same examples give the same probe and report


@dataclass(frozen=True)
class Probe:
    """A fitted probe: scores = W @ state + b, with W and b in the raw state's units."""

    kind: str  # CLASSES or NUMBER
    weights: bytes  # float64 [rows, width]: one row (binary, number) or one per class
    intercepts: tuple[float, ...]
    classes: tuple[int, ...]  # CLASSES: the label index each outcome stands for (binary: negative, positive)
    width: int  # the hidden state's size
    examples: int  # how many examples it was fitted on

    def matrix(self) -> np.ndarray:
        return np.frombuffer(self.weights, dtype=np.float64).reshape(-1, self.width)

    def predict(self, states: np.ndarray) -> list:
        """Predictions for a matrix of states (a row each): label indexes, or numbers."""
        scores = states.astype(np.float64) @ self.matrix().T + np.asarray(self.intercepts)
        if self.kind == NUMBER:
            return [float(v) for v in scores[:, 0]]
        if scores.shape[1] == 1:
            return [self.classes[1] if v > 0 else self.classes[0] for v in scores[:, 0]]
        return [self.classes[i] for i in np.argmax(scores, axis=1)]

    def probabilities(self, states: np.ndarray, labels: int) -> np.ndarray:
        """CLASSES: each label's probability per state ([rows, labels]; a label the probe never
        saw an example of gets none)."""
        scores = states.astype(np.float64) @ self.matrix().T + np.asarray(self.intercepts)
        if scores.shape[1] == 1:
            positive = 1.0 / (1.0 + np.exp(-np.clip(scores[:, 0], -700, 700)))
            seen = np.stack([1.0 - positive, positive], axis=1)
        else:
            scores = scores - scores.max(axis=1, keepdims=True)
            seen = np.exp(scores)
            seen /= seen.sum(axis=1, keepdims=True)
        out = np.zeros((len(states), labels))
        out[:, list(self.classes)] = seen
        return out

    def predict_one(self, state: bytes):
        """The prediction for one stored state (ValueError: a state of another width)."""
        vector = unpack_states([state])
        if vector.shape[1] != self.width:
            raise ValueError(f"a hidden state of {vector.shape[1]} values, the probe reads {self.width}")
        return self.predict(vector)[0]

    def describe(self) -> str:
        what = "logistic regression" if self.kind == CLASSES else "ridge regression"
        return f"a probe on the model's hidden state ({what}, {self.width} features)"


def fit(states: np.ndarray, targets: Sequence, kind: str) -> Probe:
    """A probe fitted on states (a row per example) and their targets (label indexes, or numbers)."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    x = np.asarray(states, dtype=np.float64)
    mean = x.mean(axis=0)
    spread = np.maximum(x.std(axis=0), MIN_SPREAD)
    z = (x - mean) / spread
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # a few hundred lbfgs steps: close enough to decide
        if kind == NUMBER:
            from sklearn.linear_model import Ridge

            model = Ridge(alpha=RIDGE_ALPHA * len(x)).fit(z, np.asarray(targets, dtype=np.float64))
            coef, intercept, classes = model.coef_.reshape(1, -1), np.atleast_1d(model.intercept_), ()
        else:
            from sklearn.linear_model import LogisticRegression

            model = LogisticRegression(C=C, class_weight="balanced", max_iter=500).fit(z, np.asarray(targets))
            coef, intercept, classes = model.coef_, model.intercept_, tuple(int(c) for c in model.classes_)
    raw = coef / spread  # z = (x - mean) / spread, folded in: W z + b = (W / spread) x + (b - (W / spread) mean)
    bias = intercept - raw @ mean
    return Probe(kind, np.ascontiguousarray(raw, dtype=np.float64).tobytes(), tuple(float(b) for b in bias), classes, x.shape[1], len(x))


def folds(targets: Sequence, kind: str, seed: int = SEED) -> list[np.ndarray]:
    """Test indexes of each cross-validation fold: stratified for classes (each fold holds every
    class where it can), by rank for numbers; seeded."""
    n = len(targets)
    rng = np.random.default_rng(seed)
    if kind == NUMBER:
        order = np.argsort(np.asarray(targets, dtype=np.float64), kind="stable")
        k = max(2, min(FOLDS, n // 2))
        return [np.sort(order[i::k]) for i in range(k)]
    labels = np.asarray(targets)
    values, counts = np.unique(labels, return_counts=True)
    k = max(2, min(FOLDS, int(counts.min())))
    assignment = np.empty(n, dtype=int)
    for value in values:
        members = np.flatnonzero(labels == value)
        members = members[rng.permutation(len(members))]
        assignment[members] = (np.arange(len(members)) + rng.integers(k)) % k
    return [np.flatnonzero(assignment == i) for i in range(k)]


def cross_validated(states: np.ndarray, targets: Sequence, kind: str) -> list:
    """Each example's prediction by a probe fitted on the other folds."""
    out: list = [None] * len(targets)
    targets = list(targets)
    for test in folds(targets, kind):
        train = np.setdiff1d(np.arange(len(targets)), test)
        train_targets = [targets[i] for i in train]
        if kind == CLASSES and len(set(train_targets)) < 2:
            continue  # cannot happen with stratified folds of >= 2 per class; left unpredicted
        probe = fit(states[train], train_targets, kind)
        for i, value in zip(test, probe.predict(states[test])):
            out[i] = value
    return out


def interval(predicted: Sequence, truth: Sequence, quality: Callable[[list, list], float], level: float = 0.95) -> tuple[float, float]:
    """A percentile bootstrap interval of `quality` over the examples (seeded: the same examples,
    the same interval). Resamples that miss a class are drawn again."""
    rng = np.random.default_rng(SEED)
    n = len(truth)
    classes = len(set(map(repr, truth)))
    values = []
    for _ in range(BOOTSTRAP):
        picks = rng.integers(n, size=n)
        sample_truth = [truth[i] for i in picks]
        if len(set(map(repr, sample_truth))) < min(classes, 2):
            continue
        value = quality([predicted[i] for i in picks], sample_truth)
        if not math.isnan(value):
            values.append(value)
    if not values:
        return (math.nan, math.nan)
    low, high = np.quantile(values, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(low), float(high)
