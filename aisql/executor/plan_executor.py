"""Run a Plan on a DuckDB connection with an engine.

1. Register one DuckDB function per AI node (lookups in planned mode, per-row calls in naive).
2. Bind the final statement, so a wrong column fails before any model time is spent.
3. Planned mode: prefetch each node's input, in plan order (later nodes filter by earlier answers).
4. Run the final statement in DuckDB; the functions answer from the prefetched results.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import pyarrow as pa
from sqlglot import exp

from aisql.executor.node import bound_calls, downstream
from aisql.executor.answers.answering import Answering
from aisql.errors import AisqlError
from aisql.executor.duckdb_errors import translate
from aisql.executor.node.embedding_runtime import EmbeddingRuntime
from aisql.executor.answers.embedding_vectors import EmbeddingSource
from aisql.executor.answers.request_kinds import kind_of
from aisql.executor.node.node_runtime import NodeRuntime
from aisql.executor.report.run_stats import NodeStats
from aisql.executor.node.tuple_hashes import with_tuple_hashes
from aisql.planner.plan import Plan, Strategy
from aisql.sql.bind import BoundStatement
from aisql.sql.source import SourceText


@dataclass
class StatementResult:
    table: pa.Table | None  # None for statements that return no rows
    nodes: list[NodeStats]


class Executor:
    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        answering: Answering,
        *,
        naive: bool = False,
        embeddings: EmbeddingSource | None = None,
        routes: dict[str, Answering] | None = None,
    ) -> None:
        """`answering` holds the engine (loaded when a prompt first needs it, so bad SQL fails
        before loading it), the answer store, the lock and the run's options. `routes`: the calls
        (by function name) another model answers (--model-map), with that model's answering."""
        self.con = con
        self.answering = answering
        self.routes = routes or {}
        self.naive = naive
        self.embeddings = embeddings  # the embedding model of AI.EMBED / AI.SIMILARITY

    def check(self, bound: BoundStatement, source: SourceText) -> None:
        """Bind the statement in DuckDB before any model work (sampling included): the AI calls
        are registered as functions that must not be called."""
        if not bound.has_ai:
            return
        errors = bound_calls.UdfErrors()
        for call in bound.calls:
            bound_calls.register_placeholder(self.con, call, errors, self._result_type(call)[0])
        try:
            self._duckdb(lambda: _bind_check(self.con, bound.ast), bound, source, errors)
            downstream.check_downstream(self.con, bound.ast, bound.calls)
        finally:
            for call in bound.calls:
                bound_calls.remove(self.con, call.function_name)

    def run(self, plan: Plan, bound: BoundStatement, source: SourceText, samples=None) -> StatementResult:
        if plan.is_relational_only:
            return StatementResult(self._duckdb(lambda: _fetch(self.con.sql(plan.final_sql)), bound, source), [])
        errors = bound_calls.UdfErrors()
        runtimes = [self._runtime(node) for node in plan.nodes]
        for runtime in runtimes:
            bound_calls.register(self.con, runtime, self.naive, errors)
        try:
            self._duckdb(lambda: _bind_check(self.con, plan.final_ast), bound, source, errors)
            for runtime in runtimes:  # examples and calibration inputs: asked before the node's own prompts
                runtime.prepare_decision(self.con, self.naive)
            if not self.naive:
                for runtime in runtimes:
                    whole = runtime.calibrates_on_its_batch  # its rule needs every answer: no early stop
                    if runtime.node.strategy is Strategy.PREFETCH and runtime.node.stop_after is not None and not whole:
                        self._prefetch_until_limit(runtime, plan, bound, source, errors)
                    elif runtime.node.strategy is Strategy.PREFETCH:
                        self._prefetch(runtime, bound, source, errors)
                    elif whole:
                        raise runtime.batch_needs_input("its input rows are found while the query runs")
            final_sql = plan.final_sql
            hashed = [r for r in runtimes if r.looks_up_by_hash]
            if hashed:  # streamed nodes: the final query passes each tuple's hash (aisql.executor.node.tuple_hashes)
                for runtime in hashed:
                    bound_calls.register_hashed(self.con, runtime, errors)
                final_sql = with_tuple_hashes(plan.final_ast, [r.call.function_name for r in hashed])
            table = self._duckdb(lambda: _fetch(self.con.sql(final_sql)), bound, source, errors)
        finally:
            for runtime in runtimes:
                bound_calls.unregister(self.con, runtime)
        for runtime in runtimes:
            if self.naive:
                runtime.stats.strategy = "naive"
            if samples is not None and runtime.node.id in samples.work:
                runtime.stats.prompts_sampled += samples.prompts[runtime.node.id]
                runtime.stats.add_engine(samples.work[runtime.node.id])
        return StatementResult(table, [r.stats for r in runtimes])

    def _runtime(self, node) -> NodeRuntime:
        """The node at run time: the embedding model's for AI.EMBED / AI.SIMILARITY, else the LLM's."""
        if kind_of(node.call.function.request).embedding:
            return EmbeddingRuntime(node, self._embedding_source(), self.answering)
        return NodeRuntime(node, self.routes.get(node.call.function_name, self.answering))

    def _embedding_source(self) -> EmbeddingSource:
        if self.embeddings is None:
            raise AisqlError("AI.EMBED / AI.SIMILARITY need an embedding model, and this run has none")
        return self.embeddings

    def _result_type(self, call) -> tuple[str, object]:
        """A call's result type; AI.EMBED's vector size is the embedding model's (read from its
        files, nothing loaded)."""
        if kind_of(call.function.request).embedding and not call.function.contents:
            return call.function.result_type(call.options, self._embedding_source().embedding_model().dimension)
        return call.function.result_type(call.options)

    def _prefetch(self, runtime: NodeRuntime, bound: BoundStatement, source: SourceText, errors: bound_calls.UdfErrors) -> None:
        """Evaluate a node's input up front; if DuckDB cannot bind the derived input (the final
        statement did bind), the node streams instead: slower, never wrong."""
        try:
            runtime.prefetch(self.con)
            if runtime.node.input_limited:  # DuckDB projects every row before its top-N: the rows it drops stay unasked
                runtime.closed = True
        except duckdb.BinderException as err:
            if errors.first is not None:
                raise errors.first from None
            if runtime.calibrates_on_its_batch:
                raise runtime.batch_needs_input(f"its input rows cannot be derived ({str(err).splitlines()[0]})") from None
            runtime.stream_instead(f"input rows not derivable ({str(err).splitlines()[0]})")
        except duckdb.InterruptException:  # Ctrl-C while DuckDB ran it: a stop, never a fallback
            raise KeyboardInterrupt from None
        except duckdb.Error as err:
            if errors.first is not None:
                raise errors.first from None
            raise translate(err, bound, source) from None

    def _prefetch_until_limit(self, runtime: NodeRuntime, plan: Plan, bound: BoundStatement, source: SourceText, errors) -> None:
        """A LIMIT k with nothing ordering the rows (planner rule stop_at_limit): evaluate in
        chunks until the statement, its LIMIT removed, has k rows among the answers known."""
        wanted = runtime.node.stop_after
        if wanted == 0:  # LIMIT 0: no row is wanted, no prompt is asked
            runtime.closed = True
            return
        unlimited = plan.final_ast.copy()
        unlimited.set("limit", None)
        unlimited.set("offset", None)
        count_sql = f"SELECT count(*) FROM ({unlimited.sql(dialect='duckdb')}) AS __aisql_rows"

        def enough() -> bool:
            return self._duckdb(lambda: self.con.sql(count_sql).fetchall()[0][0], bound, source, errors) >= wanted

        self._duckdb(lambda: runtime.prefetch_until(self.con, enough, first_chunk=runtime.node.first_chunk), bound, source, errors)

    def _duckdb(self, action, bound: BoundStatement, source: SourceText, errors: bound_calls.UdfErrors | None = None):
        try:
            return action()
        except duckdb.InterruptException:  # Ctrl-C while DuckDB ran it: a stop, never a fallback
            raise KeyboardInterrupt from None
        except duckdb.Error as err:
            if errors is not None and errors.first is not None:
                raise errors.first from None
            raise translate(err, bound, source) from None


def _bind_check(con: duckdb.DuckDBPyConnection, ast: exp.Expression) -> None:
    """Bind (not run) the query part of a statement: `con.sql` on a query only binds."""
    if isinstance(ast, exp.Query):
        con.sql(ast.sql(dialect="duckdb"))
        return
    inner = ast.args.get("expression")  # CREATE TABLE ... AS <query>, INSERT INTO ... <query>
    if isinstance(inner, exp.Query):
        con.sql(inner.sql(dialect="duckdb"))


def _fetch(relation) -> pa.Table | None:
    return None if relation is None else relation.to_arrow_table()

