"""Approximate AI.IF with guarantees: a proxy answers the rows it is sure of, the LLM the rest.

Opt-in (`optimization_mode => 'MINIMIZE_COST'`, `{'recall': r, 'precision': p, 'delta': d}`,
`--approximate`). The promise, relative to the LLM's own answers over the node's distinct prompts:
recall >= r and precision >= p, both with probability >= 1 - delta.

Method — a two-threshold cascade in the manner of SUPG (Kang et al., "Approximate Selection with
Guarantees using Proxies", VLDB 2020) and LOTUS's sem_filter cascades (Patel et al., 2024):

1. A uniform, seeded sample of the prompts is answered by the LLM (through the result cache: real
   answers, reused by any later run). Half of it trains the proxy: logistic regression on the
   embedding model's vectors of the prompts; the other half calibrates the thresholds, so the
   bounds are not fitted to the rows they are checked on.
2. Proxy scores s. Rows with s >= t_hi are answered TRUE by the proxy, rows with s < t_lo FALSE;
   the rows between, and the sample, are answered by the LLM.
3. Recall: only rows below t_lo lose positives. Candidates t_lo rise from the lowest score; each is
   kept while the Clopper-Pearson upper bound (level delta/2) of the share of the calibration
   sample's positives below it is <= 1 - r (fixed-sequence testing: the first failure stops, so
   the sequence costs no Bonferroni correction). Precision: only rows above t_hi can be false
   positives (the LLM's own answers are right by definition); candidates t_hi fall from the top
   while the Clopper-Pearson lower bound (level delta/2) of the positives' share above it is >= p.
   A union bound gives both targets together with probability >= 1 - delta. SUPG targets one of
   recall or precision at a time; this is its two-sided composition (as LOTUS's cascade does).
4. If the proxy would leave more than MAX_LLM_SHARE of the rows to the LLM anyway, or the sample
   has too few positives or negatives to bound anything, the node falls back to exact evaluation
   and says so (BigQuery fails the query instead: a deliberate deviation).

Proxy answers live only in this run's values: never under the LLM's cache key.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from aisql.planner.approximation import MAX_LLM_SHARE, Targets, sample_size

MIN_CLASS = 8  # positives and negatives needed in the calibration half to bound anything


@dataclass
class CascadeReport:
    """What a cascade did, for stats and output labels."""

    targets: Targets
    rows: int = 0
    sample: int = 0
    proxy_true: int = 0
    proxy_false: int = 0
    llm_rows: int = 0  # distinct prompts the LLM answered (the sample included)
    fallback: str = ""  # why the node was evaluated exactly instead
    thresholds: tuple[float, float] = (0.0, 0.0)
    estimated_recall: float | None = None  # on the calibration half
    estimated_precision: float | None = None
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "targets": {"recall": self.targets.recall, "precision": self.targets.precision, "delta": self.targets.delta},
            "rows": self.rows,
            "sample": self.sample,
            "proxy_answered": self.proxy_true + self.proxy_false,
            "llm_answered": self.llm_rows,
            "fallback_to_exact": self.fallback or None,
            # an empty side's threshold is infinite: null, as strict JSON (--stats-json) has no Infinity
            "thresholds": [t if np.isfinite(t) else None for t in self.thresholds],
            "estimated_recall": self.estimated_recall,
            "estimated_precision": self.estimated_precision,
            **self.extra,  # the proxy (name, why, its prompts), the sampling, the stages used
        }


def choose_sample(texts: Sequence[str], size: int, seed: int) -> list[str]:
    """A uniform sample, reproducible from the seed and the texts alone (not their order)."""
    ordered = sorted(texts, key=lambda t: hashlib.sha256(f"{seed}\x1f{t}".encode()).digest())
    return ordered[:size]


def clopper_pearson(successes: int, trials: int, alpha: float) -> tuple[float, float]:
    """Exact one-sided binomial bounds at level alpha: (lower, upper)."""
    from scipy.stats import beta

    if trials == 0:
        return 0.0, 1.0
    lower = 0.0 if successes == 0 else float(beta.ppf(alpha, successes, trials - successes + 1))
    upper = 1.0 if successes == trials else float(beta.ppf(1 - alpha, successes + 1, trials - successes))
    return lower, upper


def thresholds(scores: np.ndarray, labels: np.ndarray, targets: Targets) -> tuple[float, float] | None:
    """(t_lo, t_hi) from the calibration half's proxy scores and LLM labels; None if the sample
    cannot bound the targets. Rows with s < t_lo are FALSE, s >= t_hi TRUE, the rest go to the LLM."""
    positives = int(labels.sum())
    negatives = len(labels) - positives
    if positives < MIN_CLASS or negatives < MIN_CLASS:
        return None
    alpha = targets.delta / 2
    order = np.argsort(scores, kind="stable")
    s, y = scores[order], labels[order]
    # t_lo: rise while the positives lost below it stay within 1 - recall (upper bound).
    t_lo = -np.inf
    lost = 0
    for index in range(len(s)):
        lost_if = lost + int(y[index])
        if clopper_pearson(lost_if, positives, alpha)[1] > 1 - targets.recall:
            break
        lost = lost_if
        t_lo = s[index + 1] if index + 1 < len(s) else np.inf
    # t_hi: fall while the share of positives above it stays at least `precision` (lower bound).
    # The sequence starts at the fewest rows whose bound could pass at all (k all positive:
    # alpha^(1/k) >= precision): tested earlier, it would stop the sequence on too little data.
    t_hi = np.inf
    first = int(np.ceil(np.log(alpha) / np.log(targets.precision)))
    for index in range(len(s) - first, -1, -1):
        above = len(s) - index
        kept = int(y[index:].sum())
        if clopper_pearson(kept, above, alpha)[0] < targets.precision:
            break
        t_hi = s[index]
    if t_hi < t_lo:  # the regions may not overlap: the middle is empty
        t_hi = t_lo
    return float(t_lo), float(t_hi)


def train_proxy(vectors: np.ndarray, labels: np.ndarray, seed: int) -> Callable[[np.ndarray], np.ndarray]:
    """Logistic regression on embeddings (scikit-learn), returning P(TRUE) per row."""
    from sklearn.linear_model import LogisticRegression

    if labels.min() == labels.max():
        constant = float(labels[0])
        return lambda x: np.full(len(x), constant)
    model = LogisticRegression(max_iter=1000, C=1.0, random_state=seed)
    model.fit(vectors, labels)
    return lambda x: model.predict_proba(x)[:, 1]


def run_cascade(
    texts: Sequence[str],
    targets: Targets,
    *,
    ask_llm: Callable[[list[str]], dict[str, bool | None]],
    embed: Callable[[list[str]], np.ndarray],
) -> tuple[dict[str, bool | None], CascadeReport]:
    """Answers for the distinct prompt `texts`: proxy where it is sure, the LLM elsewhere."""
    texts = sorted(set(texts))
    report = CascadeReport(targets, rows=len(texts))
    size = targets.sample or sample_size(len(texts))
    sample = choose_sample(texts, size, targets.seed)
    report.sample = len(sample)
    answers = dict(ask_llm(sample))
    if len(sample) >= len(texts):
        report.fallback = "the sample is the whole input"
        report.llm_rows = len(texts)
        return answers, report
    labelled = [t for t in sample if answers.get(t) is not None]
    rng = random.Random(targets.seed)
    rng.shuffle(labelled)
    train, calibrate = labelled[: len(labelled) // 2], labelled[len(labelled) // 2 :]
    rest = [t for t in texts if t not in answers]
    vectors = embed(train + calibrate + rest)
    y_train = np.array([bool(answers[t]) for t in train], dtype=float)
    y_cal = np.array([bool(answers[t]) for t in calibrate], dtype=float)
    proxy = train_proxy(vectors[: len(train)], y_train, targets.seed) if len(train) else None
    if proxy is None:
        return exact_fallback(texts, answers, ask_llm, report, "no labelled sample to train on")
    cal_scores = proxy(vectors[len(train) : len(train) + len(calibrate)])
    bounds = thresholds(cal_scores, y_cal, targets)
    if bounds is None:
        return exact_fallback(texts, answers, ask_llm, report, f"the sample has fewer than {MIN_CLASS} TRUE or FALSE answers to bound the targets with")
    t_lo, t_hi = bounds
    scores = proxy(vectors[len(train) + len(calibrate) :])
    answers, report = answer_by_thresholds(texts, dict(zip(rest, scores)), (t_lo, t_hi), answers, ask_llm, report)
    if report.fallback:
        return answers, report
    cal_pred = np.where(cal_scores >= t_hi, 1.0, np.where(cal_scores < t_lo, 0.0, y_cal))  # the middle: the LLM's answer
    tp = float((cal_pred * y_cal).sum())
    report.estimated_recall = round(tp / max(1.0, float(y_cal.sum())), 4)
    report.estimated_precision = round(tp / max(1.0, float(cal_pred.sum())), 4)
    return answers, report


def answer_by_thresholds(
    texts: Sequence[str], scores: dict[str, float], bounds: tuple[float, float], answers: dict, ask_llm, report: CascadeReport
) -> tuple[dict, CascadeReport]:
    """The rows the LLM has not answered (`scores`: their proxy scores): TRUE at or above t_hi,
    FALSE below t_lo, the middle asked of the LLM — or, when the LLM would answer more than
    MAX_LLM_SHARE of the rows anyway, all of them (exact, said in the report)."""
    t_lo, t_hi = bounds
    report.thresholds = (float(t_lo), float(t_hi))
    middle = [t for t, s in scores.items() if t_lo <= s < t_hi]
    asked = len(answers)
    if len(middle) + asked > MAX_LLM_SHARE * len(texts):
        return exact_fallback(texts, answers, ask_llm, report, f"the proxy is sure of too few rows (the LLM would answer {len(middle) + asked:,} of {len(texts):,})")
    for text, score in scores.items():
        if score >= t_hi:
            answers[text] = True
            report.proxy_true += 1
        elif score < t_lo:
            answers[text] = False
            report.proxy_false += 1
    answers.update(ask_llm(middle))
    report.llm_rows = asked + len(middle)
    return answers, report


def exact_fallback(texts, answers, ask_llm, report: CascadeReport, why: str):
    report.fallback = why
    answers.update(ask_llm([t for t in texts if t not in answers]))
    report.llm_rows = len(texts)
    return answers, report
