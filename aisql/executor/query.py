"""The query driver: a script of statements from text to results.

Every statement is parsed and bound before anything runs (front-end errors come first), then,
one statement at a time: checked against DuckDB's catalog (no model), planned with statistics —
selectivities of unhinted AI predicates measured on a sample where their order matters — checked
against the budget, and run. The Python API (`aisql.api`) and the CLI are thin layers over this.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa

from aisql.engine.model.calibrate import cpu_calibration
from aisql.errors import AisqlError
from aisql.executor.estimates import throughput
from aisql.executor.answers.answer_types import RunOptions
from aisql.executor.options.budget import Budget, check_plan
from aisql.executor.explaining import explain_script
from aisql.executor.estimates.measured_statistics import MeasuredStatistics
from aisql.executor.options.run_options import RunRequest
from aisql.executor.plan_executor import Executor
from aisql.executor.report.progress import NoProgress
from aisql.executor.report.run_stats import RunStats
from aisql.executor.script import bind_script, call_notes, check_endpoints, constants_of, has_ai
from aisql.executor.estimates.selectivity_samples import SampleEvaluator
from aisql.executor.session import ModelSession, ModelUsed
from aisql.functions.arguments import constants_from
from aisql.planner import PlanningContext, plan_statement
from aisql.planner.hardware import Hardware, hardware_profile
from aisql.sql.parse import explained_sql
from aisql.sql.source import SourceText


@dataclass
class QueryResult:
    table: pa.Table | None  # the last statement's rows (None if it returned none)
    stats: RunStats
    model: ModelUsed | None  # None when the script had no AI calls
    # every statement that returned rows, in order: (its number in the script, from 1; its rows)
    results: list[tuple[int, pa.Table]] = field(default_factory=list)

    def summary(self) -> str:
        """What the CLI says after a run: one line (rows, prompts, tokens, time, the model), then
        what the answers say about themselves — warnings where they carry little signal."""
        from aisql.executor.report.summary import summary_text

        return summary_text(self)

    def __repr__(self) -> str:
        from aisql.executor.report.summary import summary_line

        return f"<QueryResult {summary_line(self)}>"

    def _repr_html_(self) -> str:
        """In Jupyter: the rows as a table, the summary line, the quality lines and warnings."""
        from aisql.executor.report.notebook import result_html

        return result_html(self)


def approximate_targets(value: bool | dict | None):
    """RunRequest.approximate as cascade Targets (None: exact)."""
    from aisql.functions.arguments import target_problem
    from aisql.planner.approximation import TARGET_KEYS, Targets

    if not value:
        return None
    if value is True:
        return Targets()
    unknown = set(value) - set(TARGET_KEYS)
    if unknown:
        raise AisqlError(f"unknown approximate option {sorted(unknown)[0]!r}", hint=", ".join(TARGET_KEYS))
    for key, given in value.items():
        problem = target_problem(key, given)
        if problem:
            raise AisqlError(f"approximate {problem}")
    return Targets(**value)


def run_script(con: duckdb.DuckDBPyConnection, session: ModelSession, sql_text: str, request: RunRequest) -> QueryResult:
    """Run every statement of `sql_text`; the result is the last one that returned rows.

    Answers are committed to the result cache every `checkpoint_every` prompts or
    `checkpoint_seconds` of model time, so a killed run loses at most one chunk. `max_prompts` /
    `max_cost` (USD of model time at the hardware's price) stop the run before it crosses the
    limit: first against the planner's estimate (cached prompts are free), then chunk by chunk."""
    started = time.perf_counter()
    source = SourceText(sql_text)
    with constants_from(constants_of(con)):  # labels from a subquery read the user's tables
        statements = bind_script(source, request.dialect, request.params, request.flock)
    routes = check_endpoints(statements, session, request.strict_models, request.model_map)
    profile, budget = _pricing(request, session)
    answering = session.answering(_run_options(request, session, budget))
    executor = Executor(con, answering, naive=request.naive, embeddings=session, routes=_routed(routes, session, answering))
    samples = None if request.naive else SampleEvaluator(answering)
    nodes = []
    table = None
    results: list[tuple[int, pa.Table]] = []
    for number, bound in enumerate(statements, 1):
        explained = _explained_with_ai(bound, request.dialect)
        if explained is not None:  # EXPLAIN of a statement with AI calls: aisql's plan
            table = pa.table({"plan": str(explain_script(con, session, explained, request)).splitlines()})
            results.append((number, table))
            continue
        executor.check(bound, source)
        stats = None
        if bound.has_ai and not request.naive:
            stats = MeasuredStatistics(con, session.facts, sampler=samples, embedding_model=session.embedding_model)
        where = "the query" if len(statements) == 1 else f"statement {number}"
        plan = _checked_plan(bound, stats, session, profile, budget, where)
        result = executor.run(plan, bound, source, samples)
        nodes.extend(result.nodes)
        if result.table is not None:
            table = result.table
            if _returns_rows(bound.statement.ast):
                results.append((number, table))
    stats, used = _run_stats(session, request, statements, nodes, profile, started)
    stats.notes = routes.notes + stats.notes
    if results:
        table = results[-1][1]  # the last query's rows, not a later CREATE's row count
    return QueryResult(table=table, stats=stats, model=used, results=results)


def _routed(routes, session: ModelSession, answering):
    """Each call a --model-map sends to another model -> that model's answering (one per model
    per run: its own engine, loaded on first need, and its own result-cache key)."""
    by_model: dict[str, object] = {}
    for spec in set(routes.by_call.values()):
        by_model[spec] = session.proxy_session(spec).answering(answering.options)
    return {call: by_model[spec] for call, spec in routes.by_call.items()}


def _pricing(request: RunRequest, session: ModelSession) -> tuple[Hardware | None, Budget | None]:
    """The hardware profile the run is costed at (when a price or a limit asks for one) and its
    budget (when a limit is set)."""
    profile = None
    if any(v is not None for v in (request.hardware, request.price_per_hour, request.max_cost, request.max_prompts)):
        profile = hardware_profile(request.hardware or session.default_hardware(), request.price_per_hour, cpu_calibration)
        profile = throughput.calibrated(profile, throughput.measured_here(profile, session))
    budget = None
    if request.max_prompts is not None or request.max_cost is not None:
        budget = Budget(request.max_prompts, request.max_cost, price_per_hour=profile.price_per_hour if profile else 0.0)
    return profile, budget


def _run_options(request: RunRequest, session: ModelSession, budget: Budget | None) -> RunOptions:
    return RunOptions(
        request,
        budget=budget,
        progress=request.progress or NoProgress(),
        approximate=None if request.naive else approximate_targets(request.approximate),
        embeddings=session,
        proxies=session,
    )


def _explained_with_ai(bound, dialect: str | None) -> str | None:
    """The statement an `EXPLAIN <statement with AI calls>` explains (DuckDB's EXPLAIN cannot
    bind AI calls: aisql's plan answers it); None for any other statement."""
    explained = explained_sql(bound.statement)
    if explained is None:
        return None
    analyze = re.match(r"\s*ANALY[SZ]E\b", explained, re.IGNORECASE)
    if analyze:
        explained = explained[analyze.end() :]
    if not has_ai(explained, dialect):
        return None
    if analyze:
        raise AisqlError(
            "EXPLAIN ANALYZE of a statement with AI calls is not supported",
            hint="run it with `aisql run --stats-json stats.json` for what each AI node did",
        )
    return explained


def _checked_plan(bound, stats: MeasuredStatistics | None, session: ModelSession, profile, budget: Budget | None, where: str):
    """The statement's plan, checked before anything is paid: first against an estimate that
    runs no model (not even selectivity samples), then against the sampled plan that will run."""
    if stats is not None:
        with stats.sampling_paused():  # the checks too: nothing is paid before they pass
            unsampled = plan_statement(bound, PlanningContext(stats))
            if not streams_nodes(session):
                check_held_prompts(unsampled, stats)
            if budget is not None:
                check_plan(unsampled, stats, session, profile, budget, where)
    plan = plan_statement(bound, PlanningContext(stats))
    if budget is not None and stats is not None:
        check_plan(plan, stats, session, profile, budget, where)
    return plan


def _run_stats(session: ModelSession, request: RunRequest, statements, nodes: list, profile, started: float):
    """The run's statistics (and the model that answered), its speed remembered for estimates."""
    llm_nodes = [n for n in nodes if n.model_kind == "llm"]
    used = session.model_used() if nodes else None
    if used is not None and used.device is not None and session.pool is None:  # one engine's speed, not a pool's
        throughput.remember(session, llm_nodes, "naive" if request.naive else "planned", started)
    stats = RunStats(
        model=used.name if used else session.model_name(),
        model_note=used.note if used else None,
        mode="naive" if request.naive else "planned",
        nodes=nodes,
        wall_s=time.perf_counter() - started,
        hardware=profile.name if profile else None,
        price_per_hour=profile.price_per_hour if profile else None,
        notes=call_notes(statements),
        embed_model=session.embedding_model().name if len(llm_nodes) < len(nodes) else None,
        numerics=used.numerics if used and llm_nodes else None,
        threads=used.threads if used and llm_nodes else None,
        kernels=used.kernels if used and llm_nodes else None,
        worker_pool=[w.to_dict() for w in session.pool.worker_stats()] if session.pool is not None else [],
    )
    return stats, used


MAX_HELD_PROMPTS = 10_000_000  # distinct prompts of one node a planned run holds in memory


def streams_nodes(session: ModelSession) -> bool:
    """Large nodes stream through a worker pool into a result-cache file (aisql.executor.cluster.
    streaming): the driver holds ~28 bytes per prompt, not its text, so MAX_HELD_PROMPTS does not
    apply. Without a cache file the answers (and texts) are held in memory."""
    from aisql.executor.store.cache import SqliteAnswerStore

    return session.cluster is not None and isinstance(session.store, SqliteAnswerStore)


def check_held_prompts(plan, stats: MeasuredStatistics) -> None:
    """Refuse, from DuckDB's count and before any prompt is rendered, a node whose distinct
    prompts a planned run could not hold: it renders a node's input whole to deduplicate and
    order it (a 10^4 x 10^4 cross join under AI.IF: 10^8 prompts, GBs before the first answer)."""
    for node in plan.nodes:
        counted = stats.input_profile(node)
        if counted is not None and counted.unique > MAX_HELD_PROMPTS:
            about = "about " if counted.distinct_estimated else ""
            raise AisqlError(
                f"AI call {node.call.describe()} has {about}{counted.unique:,} distinct prompts; a planned run holds "
                f"at most {MAX_HELD_PROMPTS:,} per AI call in memory: not started",
                hint="filter its input first (a WHERE, a join condition, a LIMIT in a subquery) or run it in parts",
                line=node.call.line,
            )


def _returns_rows(ast) -> bool:
    """A statement whose rows are its result (a query, DESCRIBE, SHOW, PRAGMA ...), as the duckdb
    CLI prints them; CREATE ... AS, INSERT and the like return only a count here."""
    from sqlglot import exp

    if isinstance(ast, (exp.Create, exp.Insert, exp.Update, exp.Delete, exp.Merge, exp.Copy, exp.Drop, exp.Alter)):
        return False
    return not (isinstance(ast, exp.Query) and ast.args.get("into") is not None)


