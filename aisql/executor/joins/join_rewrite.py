"""AI joins that do not ask the model every pair: a cheap score for every pair, then answers.

An exact AI join asks the model once per distinct pair (each row's prefix shared, still N x M
questions). Opt-in (`{'join': 'classify' | 'embed'}` on the call, or approximate mode, where the
strategy is chosen here per join), the node instead scores every pair with something that costs
about N model passes or none. The model's answers to original pairs — a check's rows, a
cascade's sample and middle — are the exact plan's prompts under its cache key: a later exact
run reuses them.

Both strategies score P(candidate | row) — a distribution over the smaller side for each row:
- **classify** (Snowflake's join rewrite, arXiv 2511.07663): the smaller side has at most
  MAX_CANDIDATES distinct values, listed once in the system message as AI.CLASSIFY lists its
  categories (the list is a prefix every row shares), the row's prompt follows with the
  candidates' places marked, and every candidate is scored in the one pass over the row
  (AI.CLASSIFY's scoring: labels of several tokens by full likelihood). N prompts, cached under
  their own key (they are other prompts). The rewrite answers the pairs itself — the
  candidates a row's classification rates above an even spread (above_uniform_matches) —
  after a quality check: the model answers every original pair of a
  seeded sample of rows (whole rows: each row's prefix once, as the exact plan computes it);
  where the rewrite's recall or precision against those answers is below the targets, the join
  is evaluated exactly and says so. A check on a few rows, not a bound: its point estimates
  decide, its Clopper-Pearson lower bounds are reported beside them. (Measured on SemBench
  reviews x genres with Qwen2.5-0.5B, RESULTS §30: the rewrite agrees poorly with the model's
  own pair answers, yet matches the human labels better than they do.)
- **embed** (LOTUS's sem_join blocking): the embedding model's vectors of the n + m side texts,
  cosines by matrix products in blocks, a softmax over each row's candidates; the cascade of
  approximate mode runs on that score, so recall and precision against the model are bounded
  with probability >= 1 - delta. No LLM pass.

Importance sampling (SUPG) is the default here: matches in a join are usually rare, and a uniform
sample of a few hundred pairs would hold too few of them to bound anything.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from aisql.planner.approximation import MAX_CANDIDATES, Targets

CANDIDATE_MARK = "[category]"  # where the candidate's values stood in the row's prompt
TASK_DESCRIPTION = (
    "The input is a statement in which {mark} stands for one of the categories. "
    "Choose the category that makes the statement true."
)
MAX_LABEL_TOKENS = 16  # candidates longer on average are not label-like: a listing saves little (join_answers)
CHECK_ROWS = 16  # the quality check's rows at least (all their original pairs asked), or CHECK_SHARE of the rows
CHECK_SHARE = 0.05
EMBED_TEMPERATURE = 0.05  # cosines of the project's embedding model span ~0-0.7: sharp enough to rank a row's candidates
BLOCK_ROWS = 4096  # rows per block of the cosine product (4096 x m floats at a time)
JOIN_SAMPLING = "importance"  # a join's sampling under 'auto'
# Labelled pairs (a join's examples) judge the strategies where they hold at least this many
# matches among the join's candidates; fewer: the check against the model's answers decides.
MIN_LABELLED_POSITIVES = 4


@dataclass(frozen=True)
class JoinPairs:
    """A join node's distinct pair prompts, each split into its row and its candidate: the
    side with more distinct values is the rows, the other the candidates."""

    texts: list[str]  # distinct pair prompts, sorted
    row_of: np.ndarray  # per text: index into rows
    candidate_of: np.ndarray  # per text: index into candidates
    rows: list[tuple]  # distinct tuples of the row side's arguments
    candidates: list[tuple]  # distinct tuples of the candidate side's arguments
    row_args: tuple[int, ...]
    candidate_args: tuple[int, ...]

    @property
    def pairs(self) -> int:
        return len(self.texts)


def sides(argument_tables: Sequence[set[str]]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The prompt's arguments by table: two groups when every argument reads exactly one of two
    tables, else None (a rewrite needs the pair to split into its two rows)."""
    tables = sorted(set().union(*argument_tables)) if argument_tables else []
    if len(tables) != 2 or any(len(t) != 1 for t in argument_tables):
        return None
    first = tuple(i for i, t in enumerate(argument_tables) if t == {tables[0]})
    second = tuple(i for i, t in enumerate(argument_tables) if t == {tables[1]})
    return first, second


def split_pairs(text_of: dict[tuple, str], groups: tuple[tuple[int, ...], tuple[int, ...]]) -> JoinPairs:
    """Index the pairs by their two sides (the side with fewer distinct values: the candidates)."""
    first, second = groups
    keys = [{}, {}]
    for values in text_of:
        keys[0].setdefault(tuple(values[i] for i in first), None)
        keys[1].setdefault(tuple(values[i] for i in second), None)
    lengths = [sum(len(str(v)) for key in side for v in key) for side in keys]
    row_side = 0 if (len(keys[0]), lengths[0]) >= (len(keys[1]), lengths[1]) else 1  # ties: the shorter texts are listed
    row_args, candidate_args = (first, second) if row_side == 0 else (second, first)
    rows = sorted(keys[row_side])
    candidates = sorted(keys[1 - row_side])
    row_index = {r: i for i, r in enumerate(rows)}
    candidate_index = {c: i for i, c in enumerate(candidates)}
    by_text: dict[str, tuple[int, int]] = {}
    for values, text in text_of.items():
        by_text.setdefault(text, (row_index[tuple(values[i] for i in row_args)], candidate_index[tuple(values[i] for i in candidate_args)]))
    texts = sorted(by_text)
    row_of = np.fromiter((by_text[t][0] for t in texts), dtype=np.int64, count=len(texts))
    candidate_of = np.fromiter((by_text[t][1] for t in texts), dtype=np.int64, count=len(texts))
    return JoinPairs(texts, row_of, candidate_of, rows, candidates, row_args, candidate_args)


def candidate_label(values: tuple) -> str:
    return ", ".join(str(v) for v in values)


def listing_problem(pairs: JoinPairs) -> str | None:
    """Why the candidates cannot be listed as categories (None: they can)."""
    problem = too_many(len(pairs.candidates))
    if problem:
        return problem
    labels = [candidate_label(c).strip() for c in pairs.candidates]
    if any(not label for label in labels) or len(set(labels)) < len(labels):
        return "two candidates read the same (or one is empty) once written as a category"
    return None


def choose_strategy(requested: str, candidates: int, problem: str | None, has_embeddings: bool) -> tuple[str, str]:
    """(strategy, why): what an AI join runs. `requested`: the call's `join` ('auto' under
    approximate mode); `candidates`: the smaller side's distinct values; `problem`: why they
    cannot be listed (listing_problem), None if they can. 'proxy' is approximate mode's per-pair
    cascade; 'exact' asks every pair."""
    if requested == "classify":
        if problem is None:
            return "classify", "asked for ({'join': 'classify'})"
        return "exact", f"join as classification does not apply: {problem}"
    if requested == "embed":
        if has_embeddings:
            return "embed", "asked for ({'join': 'embed'})"
        return "exact", "embedding-blocked join needs the embedding model, and this run has none"
    if requested == "proxy":
        return "proxy", "asked for ({'join': 'proxy'})"
    if problem is None:
        return "classify", f"the smaller side has {candidates} distinct values: one prompt per row lists them"
    if has_embeddings:
        return "embed", f"{problem}: pairs scored by their sides' embeddings"
    return "proxy", f"{problem}, and no embedding model: approximate mode's per-pair cascade"


def too_many(candidates: int) -> str | None:
    if candidates > MAX_CANDIDATES:
        return f"the smaller side has {candidates:,} distinct values (a listing takes at most {MAX_CANDIDATES})"
    if candidates < 2:
        return "the smaller side has fewer than 2 distinct values"
    return None


def plan_line(strategy: str, why: str, rows: int, candidates: int) -> str:
    """explain's words for a join's strategy, from its sides' distinct values."""
    pairs = f"{rows:,} x {candidates:,} pairs"
    if strategy == "classify":
        return (
            f"join as classification ({why}): {rows:,} prompts, one per row, each scoring the {candidates} candidates listed in a "
            f"shared prefix (if they are label-like and fit the model's context), instead of {pairs}; checked against the model on a "
            f"sample of rows (at least {CHECK_ROWS}), exact if the check misses the targets"
        )
    if strategy == "embed":
        return f"embedding-blocked join ({why}): {rows + candidates:,} texts embedded, {pairs} scored by cosine; then the cascade on a sample of the pairs"
    if strategy == "exact":
        return f"exact join ({why}): {pairs} asked"
    return f"per-pair cascade ({why})"


def classification_texts(pairs: JoinPairs, render: Callable[[Sequence[str]], str]) -> list[str]:
    """Per row: the pair prompt with the candidate's values replaced by CANDIDATE_MARK."""
    arity = len(pairs.row_args) + len(pairs.candidate_args)
    out = []
    for row in pairs.rows:
        values = [CANDIDATE_MARK] * arity
        for i, value in zip(pairs.row_args, row):
            values[i] = value
        out.append(render(values))
    return out


def classification_options(pairs: JoinPairs):
    """AI.CLASSIFY's options for the rewrite: the candidates as categories, the task described."""
    from aisql.functions.ai_classify import ClassifyOptions

    labels = tuple(candidate_label(c) for c in pairs.candidates)
    return ClassifyOptions(labels, (), TASK_DESCRIPTION.format(mark=CANDIDATE_MARK))


def softmax_rows(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    weights = np.exp(shifted)
    return weights / weights.sum(axis=1, keepdims=True)


def classify_scores(pairs: JoinPairs, label_logprobs: Sequence[Sequence[float]]) -> np.ndarray:
    """P(candidate | row) per pair text, from each row's label log-probabilities."""
    matrix = softmax_rows(np.asarray(label_logprobs, dtype=float))
    return matrix[pairs.row_of, pairs.candidate_of]


def above_uniform_matches(pairs: JoinPairs, scores: np.ndarray) -> np.ndarray:
    """Join as classification's answer per pair: the candidates the row's classification rates
    above an even spread, P(candidate | row) > 1 / M — none where it cannot tell them apart,
    several where it spreads over a few (a softmax is single-label; a join is many-to-many).
    Chosen by F1 against human labels over every labelled many-to-many join here (RESULTS §30,
    `benchmarks/join_rules.py`): above top-p 0.3-0.9, top-1..3 and P >= 2/M, 3/M on average."""
    return np.asarray(scores) > 1.0 / len(pairs.candidates)


def judge_by_labels(classified: Sequence[bool], exact: Sequence[bool], truth: Sequence[bool]) -> dict:
    """Join as classification against the exact plan on labelled pairs: each one's F1 against
    the labels with a 95% bootstrap interval, and the strategy that answers — the classification
    (far cheaper: a prompt per row, not per pair) unless the exact plan's F1 is higher.
    `exact`: the exact plan's answers under the examples' rule, each pair held out of its fit."""
    from aisql.functions import probe
    from aisql.functions.decision import f1

    judged: dict = {}
    for name, answers in (("classify", classified), ("exact", exact)):
        low, high = probe.interval(list(answers), list(truth), f1)
        judged[name] = {"f1": round(f1(answers, truth), 4), "low": round(low, 4), "high": round(high, 4)}
    judged["strategy"] = "classify" if judged["classify"]["f1"] >= judged["exact"]["f1"] else "exact"
    return judged


def check_rows(pairs: JoinPairs, targets: Targets) -> list[int]:
    """The quality check's rows (indices into pairs.rows): a seeded uniform sample of the rows,
    `sample` of them where the call says, else max(CHECK_ROWS, CHECK_SHARE of the rows). Whole
    rows, so each row's prefix is computed once for all its pairs, as the exact plan computes it."""
    from aisql.executor.approximate.cascade import choose_sample

    size = targets.sample or max(CHECK_ROWS, int(CHECK_SHARE * len(pairs.rows)))
    keys = {repr(row): i for i, row in enumerate(pairs.rows)}
    return sorted(keys[k] for k in choose_sample(list(keys), min(size, len(keys)), targets.seed))


@dataclass(frozen=True)
class CheckResult:
    """The rewrite against the model's own answers on the check's pairs."""

    pairs: int
    positives: int  # the model's TRUE answers among them
    returned: int  # the rewrite's TRUE answers among them
    agreed: int  # both TRUE
    recall: float | None
    precision: float | None
    recall_lower: float | None  # Clopper-Pearson lower bounds at level delta / 2: what the check can vouch for
    precision_lower: float | None

    def passes(self, targets: Targets) -> bool:
        """Point estimates at the targets (a check, not a guarantee: see the module's docstring);
        no positives and none returned agree; no positives but some returned is a precision of 0."""
        recall = 1.0 if self.positives == 0 else self.recall
        precision = 1.0 if self.returned == 0 else self.precision
        return recall >= targets.recall and precision >= targets.precision


def check(picked: Sequence[bool], oracle: Sequence[bool], targets: Targets) -> CheckResult:
    from aisql.executor.approximate.cascade import clopper_pearson

    picked_a, oracle_a = np.asarray(picked, dtype=bool), np.asarray(oracle, dtype=bool)
    positives, returned = int(oracle_a.sum()), int(picked_a.sum())
    agreed = int((picked_a & oracle_a).sum())
    alpha = targets.delta / 2
    return CheckResult(
        pairs=len(oracle_a),
        positives=positives,
        returned=returned,
        agreed=agreed,
        recall=round(agreed / positives, 4) if positives else None,
        precision=round(agreed / returned, 4) if returned else None,
        recall_lower=round(clopper_pearson(agreed, positives, alpha)[0], 4) if positives else None,
        precision_lower=round(clopper_pearson(agreed, returned, alpha)[0], 4) if returned else None,
    )


def side_text(values: tuple) -> str:
    """A side's values as the text its embedding is taken of."""
    return "\n".join(str(v) for v in values)


def embed_scores(pairs: JoinPairs, embed: Callable[[list[str]], np.ndarray]) -> np.ndarray:
    """P(candidate | row) per pair text: a softmax of the row's cosines with every candidate,
    computed a block of rows at a time (n + m vectors in memory, never n x m Python objects)."""
    row_vectors = _unit(embed([side_text(r) for r in pairs.rows]))
    candidate_vectors = _unit(embed([side_text(c) for c in pairs.candidates]))
    scores = np.empty(pairs.pairs, dtype=float)
    order = np.argsort(pairs.row_of, kind="stable")
    sorted_rows = pairs.row_of[order]
    for start in range(0, len(pairs.rows), BLOCK_ROWS):
        stop = min(len(pairs.rows), start + BLOCK_ROWS)
        block = softmax_rows((row_vectors[start:stop] @ candidate_vectors.T) / EMBED_TEMPERATURE)
        lo, hi = np.searchsorted(sorted_rows, [start, stop])
        picked = order[lo:hi]
        scores[picked] = block[pairs.row_of[picked] - start, pairs.candidate_of[picked]]
    return scores


def _unit(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)


def join_targets(targets: Targets) -> Targets:
    """A join's targets: 'auto' sampling is importance sampling (matches are rare)."""
    if targets.sampling == "auto":
        return dataclasses.replace(targets, sampling=JOIN_SAMPLING)
    return targets
