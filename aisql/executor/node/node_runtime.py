"""One AI node at run time: its answers by argument tuple, how it gets them, and its counts.

Planned mode: `prefetch` evaluates the node's whole input up front; `lookup` serves the final
query from those answers and evaluates whatever is missing (the streaming strategy, or rows the
planner could not foresee) as one deduplicated batch per vector. Naive mode: `naive_row` sends
one prompt per row, no dedup, no store: the reference every optimisation is checked against.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Callable, Sequence

import duckdb
import numpy as np
import pyarrow as pa

from aisql.engine.base import Engine
from aisql.errors import AisqlError
from aisql.executor.node import decisions
from aisql.executor.store.answer_store import Answer
from aisql.executor.answers.answering import Answering
from aisql.executor.options.budget import BudgetExceeded
from aisql.executor.answers.evaluate import evaluate
from aisql.executor.node.approximate_node import answer_approximately
from aisql.executor.node.decision_rule import DecisionRule
from aisql.executor.node.streamed_answers import StreamedAnswers, streamed_size
from aisql.executor.answers.prompts import PromptSet
from aisql.executor.answers.request_kinds import kind_of
from aisql.executor.report.run_stats import NodeStats
from aisql.functions import Task
from aisql.functions.base import STALE
from aisql.planner.plan import AINode, Strategy


class NodeRuntime:
    def __init__(self, node: AINode, answering: Answering) -> None:
        self.node = node
        self.call = node.call
        self.task: Task = node.call.task
        self.answering = answering
        self.options = answering.options
        self.values: dict[tuple, Any] = {}  # argument tuple -> SQL value
        self.seen_texts: set[str] = answering.seen(self.task)  # shared with identical calls of the run
        self.signal_counted: set[str] = set()  # distinct texts whose confidence is in the stats
        # Stopped early (LIMIT): tuples never asked answer NULL, which no predicate keeps.
        self.closed = False
        self.streamed: StreamedAnswers | None = None  # a streamed node's answers, by prompt digest
        self.examples: decisions.Examples | None = None  # its labelled examples, once its rule is chosen from them
        self.rule = DecisionRule(self)  # its decision rule: set before its prompts, or fitted on its batch
        self.stats = NodeStats(node=node.id, function=node.call.describe(), strategy=node.strategy.value)
        if self.call.function.decides:
            self.stats.labels = list(self.task.labels)

    def result_type(self) -> tuple[str, object]:
        """(DuckDB type, Arrow type) of the node's answers."""
        return self.call.function.result_type(self.call.options)

    # ---- the decision rule (aisql.executor.node.decision_rule) --------------------------------
    @property
    def calibrates_on_its_batch(self) -> bool:
        """Batch calibration: the node's rule needs all its distinct prompts' answers first."""
        return self.rule.on_its_batch

    def prepare_decision(self, con: duckdb.DuckDBPyConnection, naive: bool) -> None:
        self.rule.prepare(con, naive)

    def batch_needs_input(self, why: str) -> AisqlError:
        return self.rule.needs_input(why)

    # ---- planned --------------------------------------------------------------------------
    def prefetch(self, con: duckdb.DuckDBPyConnection) -> None:
        """Evaluate the node's input relation (node.input_sql) as one planned batch (on a worker
        pool: streamed, prefetch_streamed)."""
        total = self.streamed_size(con)
        if total is not None:
            return self.prefetch_streamed(con, total)
        started = time.perf_counter()
        prompts = self.input_prompts(con)
        self.stats.rows_in += prompts.rows_in
        targets = self.options.targets_for(self.call)
        if targets is not None:
            answer_approximately(self, prompts, targets)
        else:
            self.answer(prompts)
        self.rule.fit_batch(prompts)
        self.stats.wall_s += time.perf_counter() - started

    def streamed_size(self, con: duckdb.DuckDBPyConnection) -> int | None:
        """The node's distinct tuples when its prefetch streams through the worker pool, else None
        (aisql.executor.node.streamed_answers)."""
        return streamed_size(self, con)

    def prefetch_streamed(self, con: duckdb.DuckDBPyConnection, total: int) -> None:
        """prefetch, streamed: answers kept by digest (aisql.executor.node.streamed_answers)."""
        self.streamed = StreamedAnswers(self)
        self.streamed.prefetch(con, total)

    @property
    def looks_up_by_hash(self) -> bool:
        """The final query passes the tuple's DuckDB hash (aisql.executor.node.tuple_hashes): a
        streamed node whose tuples' hashes are all distinct."""
        return self.streamed is not None and self.streamed.looks_up_by_hash

    def lookup_hashed(self, arrays: Sequence[pa.Array], hashes: np.ndarray, arrow_type) -> pa.Array:
        """lookup for a streamed node, by the tuples' hashes."""
        started = time.perf_counter()
        out = self.streamed.lookup_hashed(arrays, hashes, arrow_type)
        self.stats.wall_s += time.perf_counter() - started
        return out

    def prefetch_until(self, con: duckdb.DuckDBPyConnection, enough: Callable[[], bool], first_chunk: int) -> None:
        """Evaluate the input in growing chunks (first_chunk distinct prompts, then doubling) in a
        fixed order (by prompt text), until `enough()` — asked with unasked prompts answering
        NULL — says the query has its rows. Then the node stays closed: what was not asked is
        never asked."""
        started = time.perf_counter()
        prompts = self.input_prompts(con)
        texts = sorted(prompts.counts)
        self.stats.rows_in += prompts.rows_in - sum(prompts.counts.values())  # NULL rows: answered without asking
        position, size = 0, max(1, first_chunk)
        while position < len(texts):
            chunk = prompts.subset(texts[position : position + size])
            position += size
            size *= 2
            self.stats.rows_in += chunk.rows_in
            self.answer(chunk)
            if position < len(texts):
                self.closed = True
                if enough():
                    self.stats.prompts_skipped += len(set(texts[position:]) - self.seen_texts)
                    break
                self.closed = False
        self.stats.wall_s += time.perf_counter() - started

    def input_prompts(self, con: duckdb.DuckDBPyConnection) -> PromptSet:
        """The node's input relation (distinct argument tuples with their row counts) as prompts."""
        table = con.sql(self.node.input_sql).to_arrow_table()
        columns = [table.column(i).to_pylist() for i in range(self.call.arity)]
        counts = table.column(self.call.arity).to_pylist()
        return PromptSet.from_rows(self.call.template, zip(zip(*columns), counts))

    @property
    def engine(self) -> Engine:
        """Loaded on first need, so SQL errors surface before any model is loaded."""
        return self.answering.engine()

    def stream_instead(self, reason: str) -> None:
        self.node = dataclasses.replace(self.node, strategy=Strategy.STREAMING, note=reason)
        self.stats.strategy = Strategy.STREAMING.value

    def lookup(self, columns: Sequence[list]) -> list:
        """Values for one vector of argument tuples; evaluates the ones not answered yet."""
        started = time.perf_counter()
        rows = list(zip(*columns))
        if self.streamed is not None:
            out = self.streamed.lookup(rows)
            self.stats.wall_s += time.perf_counter() - started
            return out
        missing = PromptSet(self.call.template)
        if not self.closed:
            for values in rows:
                if values not in self.values and not any(v is None for v in values):
                    missing.add(values)
        if missing.rows_in:
            streaming = self.node.strategy is Strategy.STREAMING
            self.stats.rows_in += missing.rows_in
            if not streaming:
                self.stats.prompts_late += len(missing.counts)
            self.answer(missing)
        out = [None if any(v is None for v in values) else self.values.get(values) for values in rows]
        self.stats.wall_s += time.perf_counter() - started
        return out

    def answer(self, prompts: PromptSet) -> None:
        """Fill self.values for every tuple of `prompts`, asking the model only for new texts."""
        try:
            known, counts = self.answering.answer_texts(
                prompts.counts,
                self.task,
                seen=self.seen_texts,
                progress=(self.node.id, self.call.describe()),
                group_by=self._anchor_groups(prompts),
                fixed_text=self.fixed_text(),
            )
            self.stats.add(counts)
        except BudgetExceeded:
            raise
        except AisqlError as err:
            raise self.located(err) from None
        for values, text in prompts.text_of.items():
            self.values[values] = known[text].value
        if self.rule.collect(known, prompts.counts):  # a batch calibration waits for every answer; so does the signal
            return
        self.count_signal((text, known[text]) for text in prompts.counts)

    def count_signal(self, answers) -> None:
        """Each distinct answer's signal once; where the node has a rule of its own, whether the
        rule changed the answer from the likeliest label."""
        own_value = self._own_value()
        for text, answer in answers:
            if text not in self.signal_counted:
                self.signal_counted.add(text)
                self.stats.count_signal(answer, own_value(answer))
                if self.call.function.decides:
                    self.stats.count_values((answer.value,))
                elif self._generates:
                    self.stats.count_generated((answer.value,))

    def count_columns(self, answers) -> None:
        """count_signal for a streamed shard's columns (aisql.executor.store.answer_store.AnswerColumns)."""
        self.stats.count_signals(answers)
        if self.call.function.decides:
            self.stats.count_values(answers.values)
        elif self._generates:
            self.stats.count_generated(answers.values)
        if self.call.function.decides:
            own_value = self._own_value()
            for answer in answers.answers():
                self.stats.count_reading(answer, own_value(answer))

    @functools.cached_property
    def _generates(self) -> bool:
        """Answers are generated text (or typed values), one per prompt: not labels, not groups
        (read once: the answer loops ask per answer)."""
        kind = kind_of(self.task)
        return kind.run is not None and not kind.labels and not kind.groups

    def _own_value(self) -> Callable[[Answer], Any]:
        """An answer -> its value under the function's own rule (the likeliest label), where the
        node's rule is another; None where it is not, or the answer cannot tell."""
        if self.task.decision is None:
            return lambda answer: None
        function, plain = self.call.function, dataclasses.replace(self.task, decision=None)

        def own(answer: Answer):
            value = function.value_from_answer(plain, answer)
            return None if value is STALE else value

        return own

    def oracle(self, prompts: PromptSet) -> Callable[[list[str]], dict]:
        """The run's model answering some of the node's own prompts exactly (its cache key, its
        counts): a cascade's sample and the rows its proxy is unsure of. The node's prompts are
        counted once, by the caller."""
        tuple_of = {text: values for values, text in prompts.text_of.items()}

        def ask_llm(texts: list[str]) -> dict:
            if not texts:
                return {}
            before = self.stats.prompts_total, self.stats.prompts_unique
            self.answer(prompts.subset(texts))
            self.stats.prompts_total, self.stats.prompts_unique = before
            return {text: self.values[tuple_of[text]] for text in texts}

        return ask_llm

    def _anchor_groups(self, prompts: PromptSet):
        """An AI join anchored on a table that is not the prompt's leading part: evaluate its
        prompts grouped by the anchor's values (the outer loop), token order within a group."""
        args = self.node.anchor_args
        if not args or args[0] == 0:
            return None  # token order already groups prompts by their leading argument
        anchor_of = {text: tuple(values[i] for i in args) for values, text in prompts.text_of.items()}
        return lambda text: anchor_of.get(text, ())

    # ---- naive ----------------------------------------------------------------------------
    def naive_row(self, values: tuple) -> Any:
        """One row, one prompt, one engine call: no dedup, no batching, no store."""
        if any(v is None for v in values):
            return None  # NULL in, NULL out: never reaches the model
        started = time.perf_counter()
        text = self.call.template.render(values)
        budget = self.options.budget
        if budget is not None and not budget.allowed(1):
            raise budget.stopped()
        try:
            (value, cost), work = self.answering.measured(self._naive_answer(text))
        except AisqlError as err:
            raise self.located(err) from None
        self.stats.add_engine(work)
        if budget is not None:
            budget.spend(1, time.perf_counter() - started)
        self.stats.rows_in += 1
        self.stats.prompts_total += 1
        self.stats.prompts_unique += text not in self.seen_texts
        self.seen_texts.add(text)
        self.stats.prompts_evaluated += 1
        self.stats.logical_tokens += cost
        self.stats.wall_s += time.perf_counter() - started
        return value

    def _naive_answer(self, text: str) -> Callable[[Engine], tuple[Any, int]]:
        """One text asked alone of an engine: (value, cost)."""

        def ask(engine: Engine) -> tuple[Any, int]:
            answer = evaluate(engine, self.task, [text], naive=True, on_overflow=self.options.on_overflow)[text]
            self.count_signal([(text, answer)])
            return answer.value, answer.cost

        return ask

    def fixed_text(self) -> str:
        """What every prompt of the call holds whatever the row: its template's own words."""
        template = self.call.template
        return template.render([""] * template.arity)

    def located(self, err: AisqlError) -> AisqlError:
        if err.line is None:
            err.line, err.col = self.call.line, self.call.col
        err.message = f"{self.call.spelling}: {err.message}"
        return err
