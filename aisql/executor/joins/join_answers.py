"""An AI join's answers without asking every pair, at run time: which strategy runs (once the
join's sides are known) and how each answers — join as classification with its check, or
embedding blocking through the cascade. The scores and rules are aisql.executor.joins.join_rewrite's;
this module drives them through a node's answering path (aisql.executor.node.node_runtime), whose
counts, cache keys and errors they share."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Protocol

import numpy as np

from aisql.errors import AisqlError
from aisql.executor.joins import join_rewrite
from aisql.executor.answers.prompts import PromptSet
from aisql.executor.report.run_stats import NodeStats
from aisql.functions import Task
from aisql.planner.plan import NodeRole


class JoinNode(Protocol):
    """What a join's (and approximate mode's) answers need of their AI node — its call, task,
    counts, answering path and answers — and nothing else of the node runtime
    (aisql.executor.node.node_runtime), which this module therefore never imports."""

    node: Any  # aisql.planner.plan.AINode
    call: Any  # aisql.sql.calls.AICall
    task: Task
    stats: NodeStats
    options: Any  # aisql.executor.answers.answer_types.RunOptions
    answering: Any  # aisql.executor.answers.answering.Answering
    examples: Any  # aisql.executor.node.decisions.Examples | None
    values: dict[tuple, Any]

    @property
    def engine(self) -> Any: ...
    def answer(self, prompts: PromptSet) -> None: ...
    def oracle(self, prompts: PromptSet) -> Callable[[list[str]], dict]: ...
    def located(self, err: AisqlError) -> AisqlError: ...


class JoinAnswers:
    """One AI join node's rewritten strategies (approximate mode, opt-in)."""

    def __init__(self, runtime: JoinNode) -> None:
        self.rt = runtime
        self._listing = None  # (AI.CLASSIFY task, one prompt per row): built once, read by the checks and the pass
        self.labels_note: str | None = None  # why labelled pairs did not judge the strategies

    def listing(self, pairs):
        """Join as classification's task (the candidates as categories) and its prompt per row."""
        if self._listing is None:
            from aisql.functions.ai_classify import FUNCTION as CLASSIFY

            task = CLASSIFY.task(join_rewrite.classification_options(pairs))
            self._listing = task, join_rewrite.classification_texts(pairs, self.rt.call.template.render)
        return self._listing

    def strategy(self, prompts: PromptSet, targets):
        """(pairs, strategy, why) for an AI join in approximate mode (aisql.executor.joins.join_rewrite);
        None for other nodes, or a join whose prompt does not split into two tables' rows."""
        if self.rt.node.role is not NodeRole.JOIN or not self.rt.call.function.decides:
            return None
        groups = join_rewrite.sides(self.rt.call.argument_tables)
        if groups is None:
            if targets.join in ("classify", "embed"):
                return None, "exact", "the prompt's arguments do not each read one of the join's two tables"
            return None
        pairs = join_rewrite.split_pairs(prompts.text_of, groups)
        problem = join_rewrite.listing_problem(pairs)
        strategy, why = join_rewrite.choose_strategy(targets.join, len(pairs.candidates), problem, self.rt.options.embeddings is not None)
        if strategy == "classify" and len(join_rewrite.check_rows(pairs, targets)) >= len(pairs.rows):
            # the check would ask every pair: the exact plan, without the classification's pass
            return pairs, "exact", f"the quality check's rows would be every row of the join ({len(pairs.rows)})"
        if strategy == "classify":
            problem = self._listing_overflow(pairs)
            if problem:
                strategy, why = ("embed" if targets.join == "auto" and self.rt.options.embeddings is not None else "exact"), problem
        return pairs, strategy, why

    def _listing_overflow(self, pairs) -> str | None:
        """Why the candidates, measured in the model's tokens, cannot be listed: labels too long
        to be label-like (each row pays every label's tokens: little under the exact plan, which
        pays them per pair plus a short framing), or the listing with the longest row past the
        model's context."""
        engine = self.rt.engine
        task, texts = self.listing(pairs)
        label_tokens = [len(engine.encode_label(label, task.framing)) for label in task.labels]
        mean = sum(label_tokens) / len(label_tokens)
        if mean > join_rewrite.MAX_LABEL_TOKENS:
            return (
                f"the candidates average {mean:.0f} tokens (more than {join_rewrite.MAX_LABEL_TOKENS}): scoring each one for every row "
                "would cost about what asking the pairs does"
            )
        longest = max(texts, key=len)
        needed = len(engine.encode_prompt(task.framing, longest)) + max(label_tokens)
        if needed > engine.info.max_context:
            return f"the candidates' listing with the longest row takes {needed:,} tokens, more than the model's context ({engine.info.max_context:,})"
        return None

    def answer(self, prompts: PromptSet, pairs, strategy: str, why: str, targets) -> None:
        """An AI join answered without asking every pair (aisql.executor.joins.join_rewrite): join as
        classification (its own answers, checked on a sample of rows) or embedding blocking
        (the pairs' cosine as the cascade's score: recall and precision guaranteed)."""
        from aisql.executor.approximate.score_first import agreement, run_score_first

        targets = join_rewrite.join_targets(targets)
        self.rt.stats.prompts_total += sum(prompts.counts.values())
        self.rt.stats.prompts_unique += len(prompts.counts)
        self.rt.stats.strategy = f"join-{strategy}"
        rewrite: dict = {}
        if strategy == "classify":
            return self._answer_classified(prompts, pairs, why, targets)
        try:
            from aisql.executor.answers.embedding_vectors import vectors_for

            scores = join_rewrite.embed_scores(pairs, lambda texts: vectors_for(texts, self.rt.options.embeddings, self.rt.answering))
            rewrite["embedded_texts"] = len(pairs.rows) + len(pairs.candidates)
            proxy = f"embeddings: {len(pairs.rows):,} + {len(pairs.candidates):,} texts"
            score_of = dict(zip(pairs.texts, scores.tolist()))
            oracle, asked = self.rt.oracle(prompts), {}

            def ask_llm(texts: list[str]) -> dict:
                answered = oracle(texts)
                asked.update(answered)
                return answered

            answers, report = run_score_first(
                pairs.texts,
                targets,
                ask_llm=ask_llm,
                proxy_scores=lambda texts: {t: score_of[t] for t in texts},
                sampling=targets.sampling,
            )
        except AisqlError as err:
            raise self.rt.located(err) from None
        for values, text in prompts.text_of.items():
            self.rt.values[values] = answers[text]
        auc = agreement(score_of, asked)  # how well the score ranks the model's own answers, where it answered
        report.extra["score_auc"] = None if auc is None else round(auc, 3)
        report.extra.update(proxy=proxy, join_strategy=strategy, join_why=why, join_rows=len(pairs.rows), join_candidates=len(pairs.candidates), **rewrite)
        self.rt.stats.approximate = report.to_dict()
        self.rt.stats.join = {"strategy": strategy, "why": why}

    def _answer_classified(self, prompts: PromptSet, pairs, why: str, targets) -> None:
        """Join as classification (aisql.executor.joins.join_rewrite): every pair answered by its row's
        classification — the candidates it rates above an even spread, P(candidate | row) > 1 / M —
        after a quality check: the model answers every original pair of a seeded sample of rows
        (the exact plan's prompts and cache key); where the rewrite's recall or precision
        against those answers is below the targets, the join is evaluated exactly and says so."""
        from aisql.executor.approximate.cascade import CascadeReport
        from aisql.executor.approximate.score_first import agreement

        if self.rt.examples is not None:
            judged = self._judged_by_labels(pairs, why)
            if judged is not None:
                return self._answer_under_labels(prompts, pairs, judged, targets)
        rewrite: dict = {}
        report = CascadeReport(targets, rows=pairs.pairs)
        rows = join_rewrite.check_rows(pairs, targets)
        try:
            scores = self._classification_scores(pairs, rewrite)
            picked = join_rewrite.above_uniform_matches(pairs, scores)
            in_check = np.isin(pairs.row_of, rows)
            checked = [pairs.texts[i] for i in np.flatnonzero(in_check)]
            oracle = self.rt.oracle(prompts)
            answers = dict(oracle(checked))
            labelled = [i for i in np.flatnonzero(in_check) if answers[pairs.texts[i]] is not None]
            result = join_rewrite.check(picked[labelled], [bool(answers[pairs.texts[i]]) for i in labelled], targets)
            report.sample = len(checked)
            if result.passes(targets):
                for i in np.flatnonzero(~in_check):
                    answers[pairs.texts[i]] = bool(picked[i])
                report.proxy_true = int(picked[~in_check].sum())
                report.proxy_false = int((~picked[~in_check]).sum())
                report.llm_rows = len(checked)
            else:
                report.fallback = (
                    f"the classification agreed with the model on the check's {result.pairs:,} pairs ({len(rows)} rows) with recall "
                    f"{_shown(result.recall)}, precision {_shown(result.precision)} (targets {targets.recall:g}, {targets.precision:g})"
                )
                answers.update(oracle([t for t in pairs.texts if t not in answers]))
                report.llm_rows = pairs.pairs
        except AisqlError as err:
            raise self.rt.located(err) from None
        for values, text in prompts.text_of.items():
            self.rt.values[values] = answers[text]
        report.estimated_recall, report.estimated_precision = result.recall, result.precision
        report.thresholds = (float("nan"), float("nan"))  # none: the rewrite answers by its own rule
        auc = agreement({pairs.texts[i]: float(scores[i]) for i in labelled}, {pairs.texts[i]: answers[pairs.texts[i]] for i in labelled})
        report.extra.update(
            score_auc=None if auc is None else round(auc, 3),  # how well P(candidate | row) ranks the model's own answers on the check
            proxy=f"join as classification: {len(pairs.rows):,} prompts list the {len(pairs.candidates)} candidates",
            join_strategy="classify", join_why=why, join_rows=len(pairs.rows), join_candidates=len(pairs.candidates),
            check={"rows": len(rows), **dataclasses.asdict(result)}, guarantee=False, **rewrite,
        )
        self.rt.stats.approximate = report.to_dict()
        self.rt.stats.join = {"strategy": "classify", "why": why, **({"labels": self.labels_note} if self.labels_note else {})}

    # ---- under labels: the strategies judged against labelled pairs --------------------------------
    def _judged_by_labels(self, pairs, why: str) -> dict | None:
        """Join as classification and the exact plan judged on the call's labelled pairs (its
        examples): the classification's answers to them (its pass over their rows) and the exact
        plan's (the examples' rule, each pair held out of its fit), F1 against the labels with
        95% intervals. None where too few labelled pairs fall in the join's candidates (the
        check against the model's answers then decides, as without labels)."""
        examples = self.rt.examples
        candidate_index = {c: i for i, c in enumerate(pairs.candidates)}
        usable = []  # (row values, candidate index, label, the exact plan's held-out answer)
        for values, label, held in zip(examples.tuples, examples.labels, examples.held_out):
            candidate = tuple(values[i] for i in pairs.candidate_args)
            if candidate in candidate_index:
                usable.append((tuple(values[i] for i in pairs.row_args), candidate_index[candidate], bool(label), bool(held)))
        positives = sum(1 for u in usable if u[2])
        if positives < join_rewrite.MIN_LABELLED_POSITIVES or positives == len(usable):
            self.labels_note = (
                f"{len(usable)} labelled pairs with {positives} matches among the join's candidates: too few to judge the strategies by "
                f"(at least {join_rewrite.MIN_LABELLED_POSITIVES} matches and one non-match); checked against the model instead"
            )
            return None
        scores = self._label_row_scores(pairs, sorted({u[0] for u in usable}))
        picked = [bool(scores[u[0]][u[1]] > 1.0 / len(pairs.candidates)) for u in usable]
        judged = join_rewrite.judge_by_labels(picked, [u[3] for u in usable], [u[2] for u in usable])
        judged.update(labelled_pairs=len(usable), labelled_matches=positives, why=why)
        return judged

    def _label_row_scores(self, pairs, rows: list[tuple]) -> dict[tuple, np.ndarray]:
        """P(candidate | row) for labelled rows, by the classification pass's task (rows of the
        join read it from the pass over the join; labelled rows outside it get their own prompt)."""
        task, _ = self.listing(pairs)
        arity = len(pairs.row_args) + len(pairs.candidate_args)
        texts = {}
        for row in rows:
            values = [join_rewrite.CANDIDATE_MARK] * arity
            for i, value in zip(pairs.row_args, row):
                values[i] = value
            texts[row] = self.rt.call.template.render(values)
        known, counts = self.rt.answering.answer_texts(
            dict.fromkeys(texts.values(), 1), task, seen=set(), progress=(f"{self.rt.node.id}-classify", f"{self.rt.call.describe()} [labelled rows]")
        )
        self.rt.stats.add_engine(counts.work)
        self.rt.stats.logical_tokens += counts.logical_tokens
        return {row: join_rewrite.softmax_rows(np.asarray([known[text].logprobs], dtype=float))[0] for row, text in texts.items()}

    def _answer_under_labels(self, prompts: PromptSet, pairs, judged: dict, targets) -> None:
        """The strategy that did better on the labelled pairs answers the join: join as
        classification (every pair by its row's classification, no check against the model —
        the labels were its check) or the exact plan (every pair asked, under the examples' rule)."""
        from aisql.executor.approximate.cascade import CascadeReport

        rewrite: dict = {}
        verdict = (
            f"chosen against {judged['labelled_pairs']} labelled pairs ({judged['labelled_matches']} matches): F1 join as classification "
            f"{_interval(judged['classify'])}, exact plan {_interval(judged['exact'])}"
        )
        strategy = judged["strategy"]
        try:
            if strategy == "classify":
                scores = self._classification_scores(pairs, rewrite)
                picked = join_rewrite.above_uniform_matches(pairs, scores)
                answers = {text: bool(p) for text, p in zip(pairs.texts, picked)}
            else:
                answers = self.rt.oracle(prompts)(list(pairs.texts))
        except AisqlError as err:
            raise self.rt.located(err) from None
        for values, text in prompts.text_of.items():
            self.rt.values[values] = answers[text]
        self.rt.stats.join = {"strategy": strategy, "why": judged["why"], "against": "labels", "verdict": verdict, **judged}
        report = CascadeReport(targets, rows=pairs.pairs)
        if strategy == "classify":
            report.proxy_true = sum(answers.values())
            report.proxy_false = len(answers) - report.proxy_true
            report.thresholds = (float("nan"), float("nan"))
            report.extra.update(
                proxy=f"join as classification: {len(pairs.rows):,} prompts list the {len(pairs.candidates)} candidates",
                join_strategy="classify", join_rows=len(pairs.rows), join_candidates=len(pairs.candidates), guarantee=False, against="labels",
                verdict=verdict, **rewrite,
            )
            self.rt.stats.approximate = report.to_dict()
        else:
            self.rt.stats.strategy = "join-exact"

    def _classification_scores(self, pairs, rewrite: dict) -> np.ndarray:
        """Join as classification's pass: one AI.CLASSIFY prompt per row, every candidate scored;
        its prompts cached under their own key, its work in the node's."""
        task, texts = self.listing(pairs)
        known, counts = self.rt.answering.answer_texts(
            dict.fromkeys(texts, 1), task, seen=set(), progress=(f"{self.rt.node.id}-classify", f"{self.rt.call.describe()} [join as classification]")
        )
        self.rt.stats.add_engine(counts.work)
        self.rt.stats.logical_tokens += counts.logical_tokens
        rewrite.update(
            rewrite_prompts=len(texts), rewrite_evaluated=counts.prompts_evaluated, rewrite_cached=counts.prompts_cached,
            rewrite_computed_tokens=counts.work.computed_tokens,
        )
        return join_rewrite.classify_scores(pairs, [known[t].logprobs for t in texts])


def _shown(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _interval(figure: dict) -> str:
    from aisql.executor.report.signals import with_interval

    return with_interval(figure["f1"], figure.get("low"), figure.get("high"))
