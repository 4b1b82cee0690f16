"""A node whose prefetch streams through the worker pool: its input read a slice at a time in
anchor order (aisql.executor.cluster.streamed_input), answers kept by prompt digest in an
AnswerIndex rather than by tuple, and looked up by the tuples' DuckDB hashes
(aisql.executor.node.tuple_hashes) — bounded driver memory, no encoding on the driver.
"""

from __future__ import annotations

import time
from typing import Any, Protocol, Sequence

import duckdb
import numpy as np
import pyarrow as pa

from aisql.errors import AisqlError
from aisql.executor.answers.prompts import PromptSet
from aisql.executor.answers.request_kinds import kind_of
from aisql.executor.cluster import streamed_input
from aisql.executor.cluster.streaming import StreamedNode
from aisql.executor.options.budget import BudgetExceeded
from aisql.executor.report.run_stats import NodeStats
from aisql.executor.store.answer_index import MISSING, AnswerIndex, digest
from aisql.functions import Task


class StreamingNode(Protocol):
    """What streaming reads of its node (aisql.executor.node.node_runtime.NodeRuntime)."""

    node: Any
    call: Any
    task: Task
    stats: NodeStats
    answering: Any
    options: Any
    values: dict[tuple, Any]
    closed: bool
    calibrates_on_its_batch: bool

    def answer(self, prompts: PromptSet) -> None: ...
    def count_columns(self, answers) -> None: ...
    def located(self, err: AisqlError) -> AisqlError: ...


def streamed_size(rt: StreamingNode, con: duckdb.DuckDBPyConnection) -> int | None:
    """The node's distinct tuples when its prefetch streams through the worker pool, else None:
    on a pool, for exact per-prompt tasks of at least STREAM_AT tuples. Smaller nodes take the
    sharded path, whose driver encodes every prompt and so counts the prefix work a split
    repeats exactly."""
    if not rt.answering.pooled() or kind_of(rt.task).groups or rt.options.targets_for(rt.call) is not None:
        return None
    if rt.calibrates_on_its_batch:  # its rule is fitted on every answer: the sharded path keeps them
        return None
    total = streamed_input.count_input(con, rt.node.input_sql, rt.call.arity)
    return total if streamed_input.streams(total) else None


class StreamedAnswers:
    """A streamed node's answers, by prompt digest (see the module docstring)."""

    def __init__(self, runtime: StreamingNode) -> None:
        self.rt = runtime
        self.index = AnswerIndex()
        self._values_array: pa.Array | None = None  # index.values as Arrow (lookup_hashed)

    def prefetch(self, con: duckdb.DuckDBPyConnection, total: int) -> None:
        """The node's input, a slice at a time, through the pool (aisql.executor.cluster.streaming).
        `total`: its distinct tuples."""
        rt = self.rt
        started = time.perf_counter()
        rt.stats.strategy = "prefetch-sliced"  # said in --stats-json: this node streamed in slices through the pool
        read = streamed_input.SliceCounts()
        lead = streamed_input.leading_args(rt.call.template, rt.node.anchor_args)
        slices = streamed_input.stream_groups(con, rt.node.input_sql, rt.call.template, rt.call.arity, lead, read, total=total)
        node_id, description = rt.node.id, rt.call.describe()

        def cluster():
            with rt.answering.lock:
                return rt.answering.engine()

        rt.options.progress.start(node_id, description, total, 0)
        try:
            key = rt.answering.key(rt.task)
            streamed = StreamedNode(rt.answering, rt.task, slices, key=key, node_id=node_id, index=self.index, on_answers=rt.count_columns)
            counts = streamed.run(cluster)
        except BudgetExceeded:
            raise
        except AisqlError as err:
            raise rt.located(err) from None
        finally:
            rt.options.progress.finish(node_id)
            rt.stats.rows_in += read.rows_in
        self.index.seal_tuples()
        rt.stats.add(counts)
        rt.stats.wall_s += time.perf_counter() - started

    @property
    def looks_up_by_hash(self) -> bool:
        """The final query passes the tuple's DuckDB hash: tuples whose hashes are all distinct."""
        index = self.index
        return self.rt.call.arity > 0 and index.sealed and not index.tuples_collided

    def lookup_hashed(self, arrays: Sequence[pa.Array], hashes: np.ndarray, arrow_type) -> pa.Array:
        """Values by the tuples' hashes: one vectorised search; a NULL argument answers NULL, and a
        tuple the prefetch did not see is rendered and asked (lookup)."""
        codes = self.index.codes_by_hash(hashes)
        nulls = np.zeros(len(codes), dtype=bool)
        for array in arrays:
            if array.null_count:
                nulls |= array.is_null().to_numpy(zero_copy_only=False)
        codes[nulls] = -1
        out = self._answer_values(arrow_type).take(pa.array(codes, mask=codes < 0))
        unseen = np.flatnonzero((codes < 0) & ~nulls)
        if len(unseen):
            rows = list(zip(*[array.take(pa.array(unseen)).to_pylist() for array in arrays]))
            filled = out.to_pylist()
            for i, value in zip(unseen.tolist(), self.lookup(rows)):
                filled[i] = value
            out = pa.array(filled, type=arrow_type)
        return out

    def _answer_values(self, arrow_type) -> pa.Array:
        """The answer values by code, as one Arrow array (built once)."""
        values = self.index.values
        if self._values_array is None or len(self._values_array) != len(values):
            self._values_array = pa.array(values, type=arrow_type)
        return self._values_array

    def lookup(self, rows: list[tuple]) -> list:
        """Values by text: each row's text rendered again and found by its digest (the rows
        lookup_hashed does not know, or every row after a hash collision); a tuple the prefetch
        did not see is asked now, as the node's own lookup asks it."""
        rt = self.rt
        render = rt.call.template.render
        texts = [None if None in values else render(values) for values in rows]
        found = self.index.get_many([digest(t) for t in texts if t is not None])
        answers = iter(found)
        values_of = [None if t is None else next(answers) for t in texts]
        missing = PromptSet(rt.call.template)
        if not rt.closed:
            for values, value in zip(rows, values_of):
                if value is MISSING and values not in rt.values and not any(v is None for v in values):
                    missing.add(values)
        if missing.rows_in:
            rt.stats.rows_in += missing.rows_in
            rt.stats.prompts_late += len(missing.counts)
            rt.answer(missing)
        return [None if value is None else (rt.values.get(values) if value is MISSING else value) for values, value in zip(rows, values_of)]
