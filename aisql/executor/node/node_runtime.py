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
from aisql.executor.store.answer_index import MISSING, AnswerIndex, digest
from aisql.executor.store.answer_store import Answer
from aisql.executor.answers.answering import Answering
from aisql.executor.options.budget import BudgetExceeded
from aisql.executor.answers.evaluate import evaluate
from aisql.executor.joins.join_answers import JoinAnswers
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
        self.index: AnswerIndex | None = None  # a streamed node's answers, by prompt digest
        # Batch calibration (opt-in): each distinct text's label log-probabilities, until the
        # node's rule is fitted on them after its prefetch (aisql.executor.node.decisions).
        self._batch: dict[str, Any] | None = None
        self._values_array: pa.Array | None = None  # index.values as Arrow (lookup_hashed)
        self.examples: decisions.Examples | None = None  # its labelled examples, once its rule is chosen from them
        self.stats = NodeStats(node=node.id, function=node.call.describe(), strategy=node.strategy.value)
        if self.call.function.decides:
            self.stats.labels = list(self.task.labels)

    def result_type(self) -> tuple[str, object]:
        """(DuckDB type, Arrow type) of the node's answers."""
        return self.call.function.result_type(self.call.options)

    # ---- the decision rule ------------------------------------------------------------------
    @property
    def calibrates_on_its_batch(self) -> bool:
        """Batch calibration: the node's rule needs all its distinct prompts' answers first."""
        return decisions.source_of(self.call) == "batch"

    def prepare_decision(self, con: duckdb.DuckDBPyConnection, naive: bool) -> None:
        """Set the node's rule before its prompts are answered: its labelled examples or its
        content-free inputs asked first (cached, planned; one prompt per call when naive); a
        batch calibration waits for the node's answers (naive: its input asked row by row first)."""
        source = decisions.source_of(self.call)
        if source is None:
            return
        started = time.perf_counter()
        ask = self._ask_naive if naive else self._ask_planned
        try:
            if source == "batch" and self.options.targets_for(self.call) is not None:
                raise AisqlError("calibration 'batch' cannot be combined with approximate mode", hint="use 'content_free' or examples")
            if source == "examples":
                rule, report, self.examples = decisions.example_rule(con, self.call, self.task, ask, reads_states=self.answering.reads_states())
            elif source == "content_free":
                rule, report = decisions.content_free_rule(self.call, self.task, ask)
            elif naive:
                texts = list(self._input_prompts(con).counts)
                answers = ask(dataclasses.replace(self.task, decision=decisions.PENDING["batch"]), texts)
                rule, report = decisions.batch_rule(self.call, self.task, [answers[t].logprobs for t in texts])
            else:
                rule, report = decisions.PENDING["batch"], {}
                self._batch = {}
        except duckdb.Error as err:
            raise self._located(AisqlError(f"calibration 'batch': the node's input cannot be read ({str(err).splitlines()[0]})")) from None
        except AisqlError as err:
            raise self._located(err) from None
        self.task = dataclasses.replace(self.task, decision=rule)
        self.stats.decision = {"source": source, **(self.stats.decision or {}), **report}
        self.stats.wall_s += time.perf_counter() - started

    def batch_needs_input(self, why: str) -> AisqlError:
        return self._located(
            AisqlError(f"calibration 'batch' needs the call's input rows before the query runs, and {why}", hint="use 'content_free' or examples")
        )

    def _ask_planned(self, task: Task, texts: list[str]) -> dict[str, Answer]:
        """Answers to the texts the rule is made from, through the answering path."""
        source = task.decision.source
        known, counts = self.answering.answer_texts(
            {t: 1 for t in texts},
            task,
            seen=set(),
            progress=(f"{self.node.id}-{source}", f"{self.call.describe()} [{source.replace('_', '-')}]"),
            fixed_text=self.fixed_text(),
        )
        self._count_rule_prompts(counts.prompts_evaluated, counts.prompts_cached, counts.logical_tokens, counts.work)
        return {t: known[t] for t in texts}

    def _ask_naive(self, task: Task, texts: list[str]) -> dict[str, Answer]:
        """The same, one text per engine call, nothing reused or stored (naive mode)."""
        out = {}
        for text in texts:
            answers, work = self.answering.measured(lambda engine: evaluate(engine, task, [text], naive=True, on_overflow=self.options.on_overflow))
            out[text] = answers[text]
            self._count_rule_prompts(1, 0, answers[text].cost, work)
        return out

    def _count_rule_prompts(self, evaluated: int, cached: int, logical: int, work) -> None:
        """Prompts asked to make the node's rule: in the node's work (naive execution asks them too)."""
        report = self.stats.decision = self.stats.decision or {}
        report["prompts_evaluated"] = report.get("prompts_evaluated", 0) + evaluated
        report["prompts_cached"] = report.get("prompts_cached", 0) + cached
        self.stats.logical_tokens += logical
        self.stats.add_engine(work)

    def _fit_batch(self, prompts: PromptSet) -> None:
        """Batch calibration after the prefetch: the rule from the node's distinct prompts, the
        values decided again by it, and the signal counted on those values."""
        answers, self._batch = self._batch, None
        rule, report = decisions.batch_rule(self.call, self.task, list(answers.values()))
        self.task = dataclasses.replace(self.task, decision=rule)
        self.stats.decision.update(report)
        function = self.call.function
        decided = {text: function.value_from_scores(self.task, lp) for text, lp in answers.items()}
        for values, text in prompts.text_of.items():
            self.values[values] = decided[text]
        self._count_signal((text, Answer(decided[text], 0, p_yes=function.p_yes(lp), logprobs=tuple(lp))) for text, lp in answers.items())

    # ---- planned --------------------------------------------------------------------------
    def prefetch(self, con: duckdb.DuckDBPyConnection) -> None:
        """Evaluate the node's input relation (node.input_sql) as one planned batch (on a worker
        pool: streamed, prefetch_streamed)."""
        total = self.streamed_size(con)
        if total is not None:
            return self.prefetch_streamed(con, total)
        started = time.perf_counter()
        prompts = self._input_prompts(con)
        self.stats.rows_in += prompts.rows_in
        targets = self.options.targets_for(self.call)
        if targets is not None:
            self._answer_approximately(prompts, targets)
        else:
            self._answer(prompts)
        if self._batch is not None:
            self._fit_batch(prompts)
        self.stats.wall_s += time.perf_counter() - started

    def streamed_size(self, con: duckdb.DuckDBPyConnection) -> int | None:
        """The node's distinct tuples when its prefetch streams through the worker pool (bounded
        driver memory, no encoding on the driver), else None: on a pool, for exact per-prompt
        tasks of at least STREAM_AT tuples. Smaller nodes take the sharded path, whose driver
        encodes every prompt and so counts the prefix work a split repeats exactly."""
        from aisql.executor.cluster import streamed_input

        if not self.answering.pooled() or kind_of(self.task).groups or self.options.targets_for(self.call) is not None:
            return None
        if self.calibrates_on_its_batch:  # its rule is fitted on every answer: the sharded path keeps them
            return None
        total = streamed_input.count_input(con, self.node.input_sql, self.call.arity)
        return total if streamed_input.streams(total) else None

    def prefetch_streamed(self, con: duckdb.DuckDBPyConnection, total: int) -> None:
        """prefetch, streamed: the input read a slice at a time in anchor order, answers kept by
        digest (aisql.executor.cluster.streaming). `total`: its distinct tuples."""
        from aisql.executor.cluster.streamed_input import SliceCounts, leading_args, stream_groups
        from aisql.executor.cluster.streaming import StreamedNode

        started = time.perf_counter()
        self.stats.strategy = "prefetch-sliced"  # said in --stats-json: this node streamed in slices through the pool
        read = SliceCounts()
        lead = leading_args(self.call.template, self.node.anchor_args)
        slices = stream_groups(con, self.node.input_sql, self.call.template, self.call.arity, lead, read, total=total)
        self.index = AnswerIndex()
        node_id, description = self.node.id, self.call.describe()

        def cluster():
            with self.answering.lock:
                return self.answering.engine()

        self.options.progress.start(node_id, description, total, 0)
        try:
            streamed = StreamedNode(
                self.answering, self.task, slices, key=self.answering.key(self.task), node_id=node_id, index=self.index, on_answers=self._count_columns
            )
            counts = streamed.run(cluster)
        except BudgetExceeded:
            raise
        except AisqlError as err:
            raise self._located(err) from None
        finally:
            self.options.progress.finish(node_id)
            self.stats.rows_in += read.rows_in
        self.index.seal_tuples()
        self.stats.add(counts)
        self.stats.wall_s += time.perf_counter() - started

    @property
    def looks_up_by_hash(self) -> bool:
        """The final query passes the tuple's DuckDB hash (aisql.executor.node.tuple_hashes): a
        streamed node whose tuples' hashes are all distinct."""
        index = self.index
        return isinstance(index, AnswerIndex) and self.call.arity > 0 and index.sealed and not index.tuples_collided

    def lookup_hashed(self, arrays: Sequence[pa.Array], hashes: np.ndarray, arrow_type) -> pa.Array:
        """lookup for a streamed node, by the tuples' hashes: one vectorised search; a NULL
        argument answers NULL, and a tuple the prefetch did not see is rendered and asked
        (_lookup_indexed)."""
        started = time.perf_counter()
        codes = self.index.codes_by_hash(hashes)
        nulls = np.zeros(len(codes), dtype=bool)
        for array in arrays:
            if array.null_count:
                nulls |= array.is_null().to_numpy(zero_copy_only=False)
        codes[nulls] = -1
        values = self._answer_values(arrow_type)
        out = values.take(pa.array(codes, mask=codes < 0))
        unseen = np.flatnonzero((codes < 0) & ~nulls)
        if len(unseen):
            rows = list(zip(*[array.take(pa.array(unseen)).to_pylist() for array in arrays]))
            filled = out.to_pylist()
            for i, value in zip(unseen.tolist(), self._lookup_indexed(rows)):
                filled[i] = value
            out = pa.array(filled, type=arrow_type)
        self.stats.wall_s += time.perf_counter() - started
        return out

    def _answer_values(self, arrow_type) -> pa.Array:
        """The streamed node's answer values by code, as one Arrow array (built once)."""
        values = self.index.values
        if self._values_array is None or len(self._values_array) != len(values):
            self._values_array = pa.array(values, type=arrow_type)
        return self._values_array

    def prefetch_until(self, con: duckdb.DuckDBPyConnection, enough: Callable[[], bool], first_chunk: int) -> None:
        """Evaluate the input in growing chunks (first_chunk distinct prompts, then doubling) in a
        fixed order (by prompt text), until `enough()` — asked with unasked prompts answering
        NULL — says the query has its rows. Then the node stays closed: what was not asked is
        never asked."""
        started = time.perf_counter()
        prompts = self._input_prompts(con)
        texts = sorted(prompts.counts)
        self.stats.rows_in += prompts.rows_in - sum(prompts.counts.values())  # NULL rows: answered without asking
        position, size = 0, max(1, first_chunk)
        while position < len(texts):
            chunk = prompts.subset(texts[position : position + size])
            position += size
            size *= 2
            self.stats.rows_in += chunk.rows_in
            self._answer(chunk)
            if position < len(texts):
                self.closed = True
                if enough():
                    self.stats.prompts_skipped += len(set(texts[position:]) - self.seen_texts)
                    break
                self.closed = False
        self.stats.wall_s += time.perf_counter() - started

    def _input_prompts(self, con: duckdb.DuckDBPyConnection) -> PromptSet:
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
        if self.index is not None:
            out = self._lookup_indexed(rows)
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
            self._answer(missing)
        out = [None if any(v is None for v in values) else self.values.get(values) for values in rows]
        self.stats.wall_s += time.perf_counter() - started
        return out

    def _lookup_indexed(self, rows: list[tuple]) -> list:
        """lookup for a streamed node by text: each row's text rendered again and found by its
        digest (the rows lookup_hashed does not know, or every row after a hash collision); a
        tuple the prefetch did not see is asked now, as lookup asks it."""
        render = self.call.template.render
        texts = [None if None in values else render(values) for values in rows]
        found = self.index.get_many([digest(t) for t in texts if t is not None])
        answers = iter(found)
        values_of = [None if t is None else next(answers) for t in texts]
        missing = PromptSet(self.call.template)
        if not self.closed:
            for values, value in zip(rows, values_of):
                if value is MISSING and values not in self.values and not any(v is None for v in values):
                    missing.add(values)
        if missing.rows_in:
            self.stats.rows_in += missing.rows_in
            self.stats.prompts_late += len(missing.counts)
            self._answer(missing)
        return [None if value is None else (self.values.get(values) if value is MISSING else value) for values, value in zip(rows, values_of)]

    def _answer(self, prompts: PromptSet) -> None:
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
            raise self._located(err) from None
        for values, text in prompts.text_of.items():
            self.values[values] = known[text].value
        if self._batch is not None:  # the rule waits for every answer (_fit_batch); so does the signal
            self._batch.update((text, known[text].logprobs) for text in prompts.counts)
            return
        self._count_signal((text, known[text]) for text in prompts.counts)

    def _count_signal(self, answers) -> None:
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

    def _count_columns(self, answers) -> None:
        """_count_signal for a streamed shard's columns (aisql.executor.store.answer_store.AnswerColumns)."""
        self.stats.count_signals(answers)
        if self.call.function.decides:
            self.stats.count_values(answers.values)
        elif self._generates:
            self.stats.count_generated(answers.values)
        if self.task.decision is not None:
            own_value = self._own_value()
            self.stats.answers_changed += sum(1 for answer in answers.answers() if own_value(answer) not in (None, answer.value))

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

    def _answer_approximately(self, prompts: PromptSet, targets) -> None:
        """Approximate mode (opt-in): the LLM answers a sample and the rows the proxy is unsure
        of; the proxy the rest — a smaller LLM (aisql.executor.approximate.score_first) or the embedding
        model (aisql.executor.approximate.cascade). Proxy answers stay in this run."""
        from aisql.executor.approximate.cascade import run_cascade
        from aisql.executor.answers.embedding_vectors import vectors_for

        joins = JoinAnswers(self)
        join = joins.strategy(prompts, targets)
        if join is not None:
            pairs, strategy, why = join
            if strategy == "exact":
                self._answer(prompts)
                self.stats.join = {"strategy": "exact", "why": why}
                return
            if strategy != "proxy":
                return joins.answer(prompts, pairs, strategy, why, targets)
            self.stats.join = {"strategy": "proxy", "why": why}
        session = self.options.proxies
        choice = session.choose_proxy(targets.proxy) if session is not None else None
        if choice is None or choice.spec is None:
            if self.options.embeddings is None:
                raise AisqlError("approximate mode needs the embedding model, and this run has none")
        self.stats.prompts_total += sum(prompts.counts.values())
        self.stats.prompts_unique += len(prompts.counts)
        ask_llm = self._oracle(prompts)
        try:
            if choice is not None and choice.spec is not None:
                from aisql.executor.approximate.score_first import run_score_first

                proxy = ProxyScorer(session.proxy_session(choice.spec), self.task, self.node.id, self.call.describe(), self.options)
                sampling = targets.sampling if targets.sampling != "auto" else DEFAULT_LLM_PROXY_SAMPLING
                answers, report = run_score_first(
                    list(prompts.counts), targets, ask_llm=ask_llm, proxy_scores=proxy, sampling=sampling, pilot=targets.proxy == "auto"
                )
                report.extra.update(proxy.report())
            else:
                answers, report = run_cascade(
                    list(prompts.counts),
                    targets,
                    ask_llm=ask_llm,
                    embed=lambda texts: vectors_for(texts, self.options.embeddings, self.answering),
                )
                report.extra["proxy"] = "embeddings"
            if choice is not None:
                report.extra["proxy_why"] = choice.why
        except AisqlError as err:
            raise self._located(err) from None
        for values, text in prompts.text_of.items():
            self.values[values] = answers[text]
        self.stats.approximate = report.to_dict()

    def _oracle(self, prompts: PromptSet) -> Callable[[list[str]], dict]:
        """The run's model answering some of the node's own prompts exactly (its cache key, its
        counts): a cascade's sample and the rows its proxy is unsure of. The node's prompts are
        counted once, by the caller."""
        tuple_of = {text: values for values, text in prompts.text_of.items()}

        def ask_llm(texts: list[str]) -> dict:
            if not texts:
                return {}
            before = self.stats.prompts_total, self.stats.prompts_unique
            self._answer(prompts.subset(texts))
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
            raise self._located(err) from None
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
            self._count_signal([(text, answer)])
            return answer.value, answer.cost

        return ask

    def fixed_text(self) -> str:
        """What every prompt of the call holds whatever the row: its template's own words."""
        template = self.call.template
        return template.render([""] * template.arity)

    def _located(self, err: AisqlError) -> AisqlError:
        if err.line is None:
            err.line, err.col = self.call.line, self.call.col
        err.message = f"{self.call.spelling}: {err.message}"
        return err


DEFAULT_LLM_PROXY_SAMPLING = "uniform"  # measured best with Qwen2.5-0.5B standing in for the 1.5B (RESULTS §26)


class ProxyScorer:
    """A proxy LLM's P(yes) for prompts of the oracle's AI.IF task, through the proxy's own
    answering path: its result cache key (its fingerprint), checkpoints and progress line."""

    def __init__(self, session, task: Task, node_id: str, description: str, options) -> None:
        import dataclasses

        self.session = session
        self.task = task
        self.progress = (f"{node_id}-proxy", f"{description} [proxy {session.model_name()}]")
        # The run's own options — its budget (the proxy's work is paid for too), overflow mode,
        # checkpoints, progress — less what would make the proxy a cascade of its own. Derived,
        # not listed: a list of fields copied is how the budget was once left behind.
        self.answering = session.answering(dataclasses.replace(options, approximate=None, embeddings=None, proxies=None))
        self.scores: dict[str, float] = {}  # a pilot's rows are scored once, not again in the full pass
        self.seen: set[str] = set()
        self.counts = None  # summed over this node's calls

    def __call__(self, texts: list[str]) -> dict[str, float]:
        todo = [t for t in texts if t not in self.scores]
        if todo:
            known, counts = self.answering.answer_texts({t: 1 for t in todo}, self.task, seen=self.seen, progress=self.progress)
            self.scores.update((t, _p_yes(known[t])) for t in todo)
            self.counts = counts if self.counts is None else self.counts + counts
        return {t: self.scores[t] for t in texts}

    def report(self) -> dict:
        counts = self.counts
        used = self.session.model_used()
        out = {"proxy": used.name, "proxy_numerics": used.numerics}
        if counts is not None:
            out.update(proxy_prompts=counts.prompts_unique, proxy_cached=counts.prompts_cached, proxy_evaluated=counts.prompts_evaluated)
        return out


def _p_yes(answer) -> float:
    """P(yes) of a proxy answer; an answer cached before P(yes) was kept scores as its value."""
    if answer.p_yes is not None:
        return float(answer.p_yes)
    return 1.0 if answer.value else 0.0
