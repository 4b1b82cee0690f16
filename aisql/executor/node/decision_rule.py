"""An AI node's decision rule at run time: set before its prompts are answered (labelled
examples, content-free inputs), or — batch calibration, opt-in — fitted on the node's own answers
after its prefetch. The rules themselves are aisql.executor.node.decisions'; this module asks
their prompts through the node's answering path and keeps the node's counts and errors.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Protocol

import duckdb

from aisql.errors import AisqlError
from aisql.executor.answers.evaluate import evaluate
from aisql.executor.answers.prompts import PromptSet
from aisql.executor.node import decisions
from aisql.executor.report.run_stats import NodeStats
from aisql.executor.store.answer_store import Answer
from aisql.functions import Task


class RuledNode(Protocol):
    """What the rule reads and sets of its node (aisql.executor.node.node_runtime.NodeRuntime)."""

    call: Any
    node: Any
    task: Task
    stats: NodeStats
    answering: Any
    options: Any
    values: dict[tuple, Any]
    examples: decisions.Examples | None

    def input_prompts(self, con: duckdb.DuckDBPyConnection) -> PromptSet: ...
    def fixed_text(self) -> str: ...
    def located(self, err: AisqlError) -> AisqlError: ...
    def count_signal(self, answers) -> None: ...


class DecisionRule:
    """One node's rule: chosen in `prepare`, or (batch calibration) collected while the node is
    answered and fitted in `fit_batch`."""

    def __init__(self, runtime: RuledNode) -> None:
        self.rt = runtime
        # Batch calibration: each distinct text's label log-probabilities, until the rule is
        # fitted on them after the node's prefetch. None: no batch is being collected.
        self.batch: dict[str, Any] | None = None

    @property
    def on_its_batch(self) -> bool:
        """Batch calibration: the node's rule needs all its distinct prompts' answers first."""
        return decisions.source_of(self.rt.call) == "batch"

    def prepare(self, con: duckdb.DuckDBPyConnection, naive: bool) -> None:
        """Set the node's rule before its prompts are answered: its labelled examples or its
        content-free inputs asked first (cached, planned; one prompt per call when naive); a
        batch calibration waits for the node's answers (naive: its input asked row by row first)."""
        rt = self.rt
        source = decisions.source_of(rt.call)
        if source is None:
            return
        started = time.perf_counter()
        try:
            rule, report = self._choose(con, source, self._ask_naive if naive else self._ask_planned, naive)
        except duckdb.Error as err:
            raise rt.located(AisqlError(f"calibration 'batch': the node's input cannot be read ({str(err).splitlines()[0]})")) from None
        except AisqlError as err:
            raise rt.located(err) from None
        rt.task = dataclasses.replace(rt.task, decision=rule)
        rt.stats.decision = {"source": source, **(rt.stats.decision or {}), **report}
        rt.stats.wall_s += time.perf_counter() - started

    def _choose(self, con: duckdb.DuckDBPyConnection, source: str, ask: Callable, naive: bool):
        rt = self.rt
        if source == "batch" and rt.options.targets_for(rt.call) is not None:
            raise AisqlError("calibration 'batch' cannot be combined with approximate mode", hint="use 'content_free' or examples")
        if source == "examples":
            rule, report, rt.examples = decisions.example_rule(con, rt.call, rt.task, ask, reads_states=rt.answering.reads_states())
            return rule, report
        if source == "content_free":
            return decisions.content_free_rule(rt.call, rt.task, ask)
        if naive:
            texts = list(rt.input_prompts(con).counts)
            answers = ask(dataclasses.replace(rt.task, decision=decisions.PENDING["batch"]), texts)
            return decisions.batch_rule(rt.call, rt.task, [answers[t].logprobs for t in texts])
        self.batch = {}
        return decisions.PENDING["batch"], {}

    def needs_input(self, why: str) -> AisqlError:
        return self.rt.located(
            AisqlError(f"calibration 'batch' needs the call's input rows before the query runs, and {why}", hint="use 'content_free' or examples")
        )

    def _ask_planned(self, task: Task, texts: list[str]) -> dict[str, Answer]:
        """Answers to the texts the rule is made from, through the answering path."""
        rt = self.rt
        source = task.decision.source
        known, counts = rt.answering.answer_texts(
            {t: 1 for t in texts},
            task,
            seen=set(),
            progress=(f"{rt.node.id}-{source}", f"{rt.call.describe()} [{source.replace('_', '-')}]"),
            fixed_text=rt.fixed_text(),
        )
        self._count_prompts(counts.prompts_evaluated, counts.prompts_cached, counts.logical_tokens, counts.work)
        return {t: known[t] for t in texts}

    def _ask_naive(self, task: Task, texts: list[str]) -> dict[str, Answer]:
        """The same, one text per engine call, nothing reused or stored (naive mode)."""
        out, rt = {}, self.rt
        for text in texts:
            answers, work = rt.answering.measured(lambda engine: evaluate(engine, task, [text], naive=True, on_overflow=rt.options.on_overflow))
            out[text] = answers[text]
            self._count_prompts(1, 0, answers[text].cost, work)
        return out

    def _count_prompts(self, evaluated: int, cached: int, logical: int, work) -> None:
        """Prompts asked to make the node's rule: in the node's work (naive execution asks them too)."""
        stats = self.rt.stats
        report = stats.decision = stats.decision or {}
        report["prompts_evaluated"] = report.get("prompts_evaluated", 0) + evaluated
        report["prompts_cached"] = report.get("prompts_cached", 0) + cached
        stats.logical_tokens += logical
        stats.add_engine(work)

    def collect(self, known: dict[str, Answer], texts) -> bool:
        """A batch calibration keeps the answers' log-probabilities for its fit (their signal is
        counted once the rule decides them); False where no batch is collected."""
        if self.batch is None:
            return False
        self.batch.update((text, known[text].logprobs) for text in texts)
        return True

    def fit_batch(self, prompts: PromptSet) -> None:
        """Batch calibration after the prefetch: the rule from the node's distinct prompts, the
        values decided again by it, and the signal counted on those values."""
        if self.batch is None:
            return
        rt = self.rt
        answers, self.batch = self.batch, None
        rule, report = decisions.batch_rule(rt.call, rt.task, list(answers.values()))
        rt.task = dataclasses.replace(rt.task, decision=rule)
        rt.stats.decision.update(report)
        function = rt.call.function
        decided = {text: function.value_from_scores(rt.task, lp) for text, lp in answers.items()}
        for values, text in prompts.text_of.items():
            rt.values[values] = decided[text]
        rt.count_signal((text, Answer(decided[text], 0, p_yes=function.p_yes(lp), logprobs=tuple(lp))) for text, lp in answers.items())
