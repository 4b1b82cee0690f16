"""Cascades whose proxy scores every row before the oracle is asked: a small LLM's one-pass
P(yes) for the same AI.IF prompt. Nothing is trained, so the whole oracle sample calibrates the
thresholds (the embedding cascade of aisql.executor.approximate.cascade spends half of it on training).

How the oracle's sample is drawn (`sampling`):
- "uniform": one seeded uniform sample of `sample_size` rows, thresholds by Clopper-Pearson as
  in aisql.executor.approximate.cascade — today's baseline.
- "progressive": the same seeded order taken in nested stages (a quarter, a half, all of the
  sample), thresholds at each stage at level delta / stages (a union bound over the stages, so
  any rule for stopping keeps the guarantee); it stops at the first stage whose middle (the rows
  the oracle would still answer) is no larger than the next stage's extra rows — more sample
  could not save more than that. A proxy that agrees with the oracle stops at a quarter.
- "importance": SUPG's importance sampling with bounds by betting (aisql.executor.approximate.importance).

Targets, fallbacks, and where proxy answers live are those of aisql.executor.approximate.cascade.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import numpy as np

from aisql.executor.approximate.cascade import MIN_CLASS, CascadeReport, answer_by_thresholds, exact_fallback, choose_sample, thresholds
from aisql.planner.approximation import PROGRESSIVE_STAGES as STAGES, Targets, sample_size

SAMPLINGS = ("progressive", "uniform", "importance")
PILOT_ROWS = 64  # an auto-chosen proxy's agreement is checked on this many sample rows first
MIN_PILOT_AUC = 0.85  # below: a 0.9 / 0.9 cascade cannot save (SmolLM2 vs Qwen-1.5B: 0.70)


def run_score_first(
    texts: Sequence[str],
    targets: Targets,
    *,
    ask_llm: Callable[[list[str]], dict[str, bool | None]],
    proxy_scores: Callable[[list[str]], dict[str, float]],
    sampling: str,
    pilot: bool = False,
) -> tuple[dict[str, bool | None], CascadeReport]:
    """Answers for the distinct prompt `texts`: the proxy where the bounds allow, the oracle elsewhere.

    `pilot` (a proxy `auto` chose, not one the user named): before the proxy's pass over every
    row, its scores on the sample's first PILOT_ROWS rows — answered by the oracle anyway — must
    rank the oracle's answers with AUC >= MIN_PILOT_AUC; else the node is evaluated exactly
    without that pass (measured: SmolLM2 standing in for Qwen2.5-1.5B, AUC 0.70, fell back after
    paying 13% over exact; Qwen2.5-0.5B, AUC 0.93, saved). Only exact evaluation depends on the
    pilot, so the guarantee of the thresholds is unchanged."""
    texts = sorted(set(texts))
    report = CascadeReport(targets, rows=len(texts))
    report.extra["sampling"] = sampling
    size = min(len(texts), targets.sample or sample_size(len(texts)))
    if size >= len(texts):
        report.sample = len(texts)
        report.fallback = "the sample is the whole input"
        report.llm_rows = len(texts)
        return dict(ask_llm(texts)), report
    known: dict[str, bool | None] = {}
    if pilot:
        rows = choose_sample(texts, len(texts), targets.seed)[: min(PILOT_ROWS, size)]  # the sample's first rows
        known = dict(ask_llm(rows))
        auc = agreement(proxy_scores(rows), known)
        report.extra["pilot_auc"] = None if auc is None else round(auc, 3)
        if auc is not None and auc < MIN_PILOT_AUC:
            report.sample = len(rows)
            why = (
                f"the proxy agreed with the LLM on a {len(rows)}-row pilot with AUC {auc:.2f} only (< {MIN_PILOT_AUC:g}): "
                "not worth its pass over every row"
            )
            return exact_fallback(texts, known, ask_llm, report, why)
    scored = proxy_scores(texts)
    scores = np.array([scored[t] for t in texts], dtype=float)
    if sampling == "importance":
        asked, bounds, weights = _importance(texts, scores, size, targets, ask_llm, known)
    else:
        stages = STAGES if sampling == "progressive" else (1.0,)
        asked, bounds, weights = _uniform(texts, scores, size, targets, ask_llm, stages, report, known)
    answers = dict(asked)
    report.sample = len(asked)
    if bounds is None:
        return exact_fallback(texts, answers, ask_llm, report, f"the sample has fewer than {MIN_CLASS} TRUE or FALSE answers to bound the targets with")
    rest = {t: float(s) for t, s in zip(texts, scores) if t not in answers}
    answers, report = answer_by_thresholds(texts, rest, bounds, answers, ask_llm, report)
    if report.fallback:
        return answers, report
    _estimate(report, asked, weights, dict(zip(texts, scores)), *bounds)
    return answers, report


def agreement(scores: dict[str, float], answers: dict[str, bool | None]) -> float | None:
    """AUC of the proxy's scores against the oracle's answers (None when one class is missing)."""
    from scipy.stats import rankdata

    labelled = [t for t, a in answers.items() if a is not None]
    y = np.array([bool(answers[t]) for t in labelled])
    positives, negatives = int(y.sum()), int((~y).sum())
    if not positives or not negatives:
        return None
    ranks = rankdata([scores[t] for t in labelled])
    return float((ranks[y].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def _uniform(texts, scores, size, targets: Targets, ask_llm, stages, report: CascadeReport, known: dict):
    """The seeded uniform order, asked stage by stage; thresholds at delta / len(stages) each."""
    order = choose_sample(texts, len(texts), targets.seed)
    score_of = dict(zip(texts, scores))
    level = dataclasses.replace(targets, delta=targets.delta / len(stages))
    answers: dict[str, bool | None] = dict(known)
    bounds = None
    for index, share in enumerate(stages):
        taken = order[: max(1, int(round(size * share)))]
        answers.update(ask_llm([t for t in taken if t not in answers]))
        labelled = [t for t in taken if answers.get(t) is not None]
        bounds = thresholds(
            np.array([score_of[t] for t in labelled]), np.array([bool(answers[t]) for t in labelled], dtype=float), level
        )
        report.extra["stages_used"] = index + 1
        if index + 1 == len(stages):
            break
        next_extra = int(round(size * stages[index + 1])) - len(taken)
        if bounds is not None:
            t_lo, t_hi = bounds
            middle = int(((scores >= t_lo) & (scores < t_hi)).sum())
            if middle <= next_extra:
                break
    return answers, bounds, None


def _importance(texts, scores, size, targets: Targets, ask_llm, known: dict):
    from aisql.executor.approximate.importance import draw, importance_thresholds

    sample = draw(texts, scores, size, targets.seed)
    rows = [texts[i] for i in sample.rows]
    answers = dict(known)  # a pilot's rows: asked already (the oracle's, never the bounds')
    answers.update(ask_llm([t for t in rows if t not in answers]))
    labels = {int(i): bool(answers.get(texts[i])) for i in sample.rows}
    bounds = importance_thresholds(scores, sample, labels, targets.recall, targets.precision, targets.delta)
    weights = {texts[i]: 1.0 / sample.probability[i] for i in sample.rows}
    return answers, bounds, weights


def _estimate(report: CascadeReport, asked: dict, weights: dict | None, score_of: dict, t_lo: float, t_hi: float) -> None:
    """Recall and precision vs the oracle on its sample (importance weights where drawn so)."""
    labelled = [t for t, a in asked.items() if a is not None and (weights is None or t in weights)]  # drawn rows only
    if not labelled:
        return
    y = np.array([bool(asked[t]) for t in labelled], dtype=float)
    s = np.array([score_of[t] for t in labelled])
    w = np.array([weights[t] for t in labelled]) if weights else np.ones(len(labelled))
    predicted = np.where(s >= t_hi, 1.0, np.where(s < t_lo, 0.0, y))
    true_positive = float((w * predicted * y).sum())
    report.estimated_recall = round(true_positive / max(1e-9, float((w * y).sum())), 4) if y.any() else None
    report.estimated_precision = round(true_positive / max(1e-9, float((w * predicted).sum())), 4) if predicted.any() else None
