"""Confidence bounds on the mean of bounded i.i.d. draws by betting (Waudby-Smith & Ramdas,
"Estimating means of bounded random variables by betting", JRSS-B 2024): valid at every sample
size, not only asymptotically, and adaptive to the variance.

Why this and not Clopper-Pearson: an importance-sampled cascade (aisql.executor.approximate.importance)
estimates a count from weighted draws `w * y`, which are not 0/1 — the exact binomial bound does
not apply, and a normal approximation (SUPG's) is only valid in the limit. A betting bound is.

For a candidate mean m, a gambler bets against "the mean is m" with the predictable plug-in
stakes of the paper (hedged, capped at c / m); if the wealth ever reaches 1 / alpha, m is
rejected (Ville's inequality: probability <= alpha when m is the true mean). The lower bound is
the largest m on a grid below the first one not rejected — rounding can only make it lower.
scipy has no such bound; the ~20 lines are written here.
"""

from __future__ import annotations

import numpy as np

GRID = 1000  # candidate means tested in [0, 1]: the bound is lowered by at most 1 / GRID
STAKE_CAP = 0.5  # c of the paper: bets at most c / m of the wealth


def betting_lower_bound(x: np.ndarray, alpha: float) -> float:
    """A lower confidence bound, at level alpha, on the mean of i.i.d. draws `x` in [0, 1]."""
    x = np.asarray(x, dtype=float)
    n = len(x)
    if n == 0:
        return 0.0
    t = np.arange(1, n + 1, dtype=float)
    mean_so_far = (0.5 + np.cumsum(x)) / (t + 1)
    variance_so_far = (0.25 + np.cumsum((x - mean_so_far) ** 2)) / (t + 1)
    variance_before = np.concatenate(([0.25], variance_so_far[:-1]))  # predictable: draws before t only
    stakes = np.sqrt(2 * np.log(1 / alpha) / (variance_before * t * np.log1p(t)))
    means = np.arange(1, GRID + 1) / GRID
    capped = np.minimum(stakes[None, :], STAKE_CAP / means[:, None])
    log_wealth = np.cumsum(np.log1p(capped * (x[None, :] - means[:, None])), axis=1)
    rejected = log_wealth.max(axis=1) >= np.log(1 / alpha)
    kept = np.flatnonzero(~rejected)
    if len(kept) == 0:
        return 1.0 - 1.0 / GRID
    first = int(kept[0])
    return float(means[first - 1]) if first > 0 else 0.0


def betting_upper_bound(x: np.ndarray, alpha: float) -> float:
    """An upper confidence bound, at level alpha, on the mean of i.i.d. draws `x` in [0, 1]."""
    return 1.0 - betting_lower_bound(1.0 - np.asarray(x, dtype=float), alpha)
