"""Importance-sampled thresholds for a cascade whose proxy scores every row before the oracle is
asked (a small LLM's P(yes)): the oracle's sample is drawn where the proxy says positives are,
and the bounds stay valid under the weights.

Method — SUPG's importance-sampling variant (Kang et al., "Approximate Selection with
Guarantees using Proxies", VLDB 2020, §5): draws i.i.d. with probability proportional to the
square root of the proxy score, mixed with the uniform distribution (a defensive mixture, so no
row's weight exceeds 1 / UNIFORM_SHARE). A draw of row i carries weight w_i = 1 / (N q_i), and
w * y * [row in a region] is an unbiased estimate of that region's share of positives. SUPG bounds
such estimates with a normal approximation, valid only in the limit; here they are bounded by
betting (aisql.executor.approximate.betting_bounds), valid at every sample size.

Thresholds, as the uniform cascade (aisql.executor.approximate.cascade): rows scoring below t_lo are FALSE,
at or above t_hi TRUE, the rest go to the oracle.
- Recall: candidates t_lo rise through quantiles of the scores; each is kept while
  LB(positives at or above it) / (UB(positives below it) + LB(positives at or above it)) >= r,
  each bound at level delta / 4; the first failure stops (fixed-sequence testing).
- Precision: candidates t_hi fall through quantiles from the top; each is kept while
  LB(positives at or above it) / (rows at or above it) >= p, at level delta / 2 (the count of
  rows is known exactly).
A union bound gives both with probability >= 1 - delta. Rows the oracle answers (the sample, the
middle) only raise recall and precision: the bounds leave them out, conservatively.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from aisql.executor.approximate.betting_bounds import betting_lower_bound, betting_upper_bound

UNIFORM_SHARE = 0.3  # of the sampling distribution: caps every weight at 1 / 0.3
QUANTILE_STEP = 0.02  # candidate thresholds: every 2% of the rows by score


@dataclass(frozen=True)
class ImportanceSample:
    """Draws (row indices, with repetition) and each row's sampling probability."""

    draws: np.ndarray  # index into the scored rows, one per draw, in draw order
    probability: np.ndarray  # q_i per row (sums to 1)

    @property
    def rows(self) -> np.ndarray:
        """The distinct rows drawn: what the oracle is asked."""
        return np.unique(self.draws)


def sampling_probabilities(scores: np.ndarray) -> np.ndarray:
    """q_i: UNIFORM_SHARE uniform, the rest proportional to sqrt(score) (SUPG's choice)."""
    n = len(scores)
    root = np.sqrt(np.clip(scores, 0.0, 1.0))
    total = root.sum()
    shaped = root / total if total > 0 else np.full(n, 1.0 / n)
    return UNIFORM_SHARE / n + (1.0 - UNIFORM_SHARE) * shaped


def draw(texts: list[str], scores: np.ndarray, size: int, seed: int) -> ImportanceSample:
    """`size` i.i.d. draws, reproducible from the seed and the texts (rows ordered by text)."""
    digest = hashlib.sha256(f"{seed}\x1f{len(texts)}\x1f{texts[0] if texts else ''}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    probability = sampling_probabilities(scores)
    return ImportanceSample(rng.choice(len(texts), size=size, replace=True, p=probability), probability)


def region_positives(
    region: np.ndarray, sample: ImportanceSample, y_drawn: np.ndarray, alpha: float, upper: bool
) -> float:
    """A bound (lower, or upper) on the positives among the rows of `region` (a mask over all rows).

    Given how many draws fell in the region, those draws are i.i.d. from q restricted to it, and
    E[y / q] = positives / Q (Q: the region's total probability, known from the scores). So
    positives = Q * M * E[z] with z = y / (q M) in [0, 1], M the region's largest 1 / q: a bounded
    mean, bounded by betting. Uniform sampling makes z a 0/1 draw: the binomial case."""
    if not region.any():
        return 0.0
    in_region = region[sample.draws]
    q = sample.probability
    total_q = float(q[region].sum())
    largest = float((1.0 / q[region]).max())
    z = y_drawn[in_region] / (q[sample.draws][in_region] * largest)
    bound = betting_upper_bound(z, alpha) if upper else betting_lower_bound(z, alpha)
    return min(float(region.sum()), total_q * largest * bound)


def importance_thresholds(
    scores: np.ndarray, sample: ImportanceSample, labels: dict[int, bool], recall: float, precision: float, delta: float
) -> tuple[float, float]:
    """(t_lo, t_hi) from the draws' oracle labels (row index -> answer). When no candidate of a
    side passes, that side stays empty (t_lo = -inf, t_hi = +inf): the oracle answers those rows."""
    y = np.array([1.0 if labels.get(int(i)) else 0.0 for i in sample.draws])
    cuts = np.unique(np.quantile(scores, np.arange(QUANTILE_STEP, 1.0, QUANTILE_STEP)))

    t_lo = -np.inf
    for cut in cuts:  # rising
        below = scores < cut
        lost = region_positives(below, sample, y, delta / 4, upper=True)
        kept = region_positives(~below, sample, y, delta / 4, upper=False)
        if kept <= 0 or kept / (lost + kept) < recall:
            break
        t_lo = float(cut)

    # The falling sequence starts where the region expects enough draws for its bound to pass at
    # all (k positives of k pass only if alpha^(1/k) >= p; twice that, as draws scatter): known
    # from the scores before any draw, so the start does not depend on the sample.
    t_hi = np.inf
    fewest = 2 * int(np.ceil(np.log(delta / 2) / np.log(precision)))
    for cut in cuts[::-1]:  # falling
        above = scores >= cut
        if len(sample.draws) * float(sample.probability[above].sum()) < fewest:
            continue
        if region_positives(above, sample, y, delta / 2, upper=False) / int(above.sum()) < precision:
            break
        t_hi = float(cut)
    if t_hi < t_lo:
        t_hi = t_lo
    return t_lo, t_hi
