"""The query driver: a script of statements from text to results, and its plans for `explain`.

Every statement is parsed and bound before anything runs (front-end errors come first), then,
one statement at a time: checked against DuckDB's catalog (no model), planned with statistics —
selectivities of unhinted AI predicates measured on a sample where their order matters — checked
against the budget, and run. The Python API (`aisql.api`) and the CLI are thin layers over this.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import time
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa
from sqlglot import exp

from aisql.engine.model.calibrate import cpu_calibration
from aisql.errors import AisqlError
from aisql.executor.budget import Budget
from aisql.executor.evaluate import OVERFLOW_MODES
from aisql.executor.measured_statistics import MeasuredStatistics
from aisql.executor.answering import RunOptions
from aisql.executor.progress import NoProgress, Progress
from aisql.executor.plan_executor import Executor
from aisql.executor.request_kinds import kind_of
from aisql.executor.run_stats import RunStats
from aisql.executor import throughput
from aisql.executor.selectivity_samples import SampleEvaluator
from aisql.planner import Plan, PlanningContext, plan_statement
from aisql.planner.cost import estimate_plan
from aisql.planner.explain import Explanation
from aisql.planner.hardware import Hardware, hardware_profile
from aisql.executor.session import ModelSession, ModelUsed
from aisql.sql.bind import BoundStatement, bind_statement
from aisql.sql.parameters import Parameters, bind_parameters, check_all_used
from aisql.sql.parse import explained_sql, parse_script
from aisql.sql.source import SourceText

_RUNS = itertools.count(1)  # bound call names are unique per process: __aisql_<run>_ai_<n>


@dataclass
class QueryResult:
    table: pa.Table | None  # the last statement's rows (None if it returned none)
    stats: RunStats
    model: ModelUsed | None  # None when the script had no AI calls
    # every statement that returned rows, in order: (its number in the script, from 1; its rows)
    results: list[tuple[int, pa.Table]] = field(default_factory=list)


@dataclass
class RunRequest:
    """How to run a script (the options of `aisql run`)."""

    dialect: str | None = None  # what the script is written in: duckdb (default), bigquery, snowflake
    params: Parameters = None  # values of $1 / ? / $name parameters: a list, or a dict by name
    naive: bool = False
    hardware: str | None = None  # cost the run at this profile's price (stats, --max-cost)
    price_per_hour: float | None = None
    max_prompts: int | None = None
    max_cost: float | None = None
    on_overflow: str = "error"
    checkpoint_every: int = 256
    checkpoint_seconds: float = 10.0
    progress: Progress | None = None  # None: silence
    # Approximate mode for every AI.IF (opt-in): True for the default targets, or a dict of
    # recall / precision / delta / sample / seed (aisql.executor.cascade). Naive runs stay exact.
    approximate: bool | dict | None = None


def approximate_targets(value: bool | dict | None):
    """RunRequest.approximate as cascade Targets (None: exact)."""
    from aisql.planner.approximation import Targets

    if not value:
        return None
    if value is True:
        return Targets()
    unknown = set(value) - {"recall", "precision", "delta", "sample", "seed"}
    if unknown:
        raise AisqlError(f"unknown approximate option {sorted(unknown)[0]!r}", hint="recall, precision, delta, sample, seed")
    for key in ("recall", "precision", "delta"):
        if key in value and not 0.0 < float(value[key]) < 1.0:
            raise AisqlError(f"approximate {key} must be between 0 and 1 (exclusive), got {value[key]}")
    return Targets(**value)


def bind_script(source: SourceText, dialect: str | None = None, params: Parameters = None) -> list[BoundStatement]:
    """Parse and bind every statement before anything runs, so front-end errors come first.
    Parameter values ($1, ?, $name) go into the syntax trees as values first."""
    statements = []
    calls_so_far = 0
    state: dict = {}
    parsed = parse_script(source, dialect)
    if params is not None or any(isinstance(n, exp.Placeholder) for s in parsed for n in s.ast.walk()):
        parsed = [
            dataclasses.replace(s, ast=bind_parameters(s.ast.copy(), params, state), parameters_bound=True) for s in parsed
        ]
        check_all_used(params, state)
    for statement in parsed:
        bound = bind_statement(statement, source, function_prefix=f"__aisql_{next(_RUNS)}_", first_call_number=calls_so_far + 1)
        calls_so_far += len(bound.calls)
        statements.append(bound)
    return statements


def run_script(con: duckdb.DuckDBPyConnection, session: ModelSession, sql_text: str, request: RunRequest) -> QueryResult:
    """Run every statement of `sql_text`; the result is the last one that returned rows.

    Answers are committed to the result cache every `checkpoint_every` prompts or
    `checkpoint_seconds` of model time, so a killed run loses at most one chunk. `max_prompts` /
    `max_cost` (USD of model time at the hardware's price) stop the run before it crosses the
    limit: first against the planner's estimate (cached prompts are free), then chunk by chunk."""
    if request.on_overflow not in OVERFLOW_MODES:
        raise AisqlError(f"unknown on_overflow mode {request.on_overflow!r}", hint="use error or truncate")
    started = time.perf_counter()
    source = SourceText(sql_text)
    statements = bind_script(source, request.dialect, request.params)
    check_endpoints(statements, session)
    wants_price = any(v is not None for v in (request.hardware, request.price_per_hour, request.max_cost, request.max_prompts))
    profile = None
    if wants_price:
        profile = hardware_profile(request.hardware or session.default_hardware(), request.price_per_hour, cpu_calibration)
        profile = calibrated(profile, _measured_here(profile, session))
    budget = None
    if request.max_prompts is not None or request.max_cost is not None:
        budget = Budget(request.max_prompts, request.max_cost, price_per_hour=profile.price_per_hour if profile else 0.0)
    options = RunOptions(
        checkpoint_every=request.checkpoint_every,
        checkpoint_seconds=request.checkpoint_seconds,
        on_overflow=request.on_overflow,
        budget=budget,
        progress=request.progress or NoProgress(),
        approximate=None if request.naive else approximate_targets(request.approximate),
        embeddings=session,
    )
    answering = session.answering(options)
    executor = Executor(con, answering, naive=request.naive, embeddings=session)
    samples = None if request.naive else SampleEvaluator(answering)
    nodes = []
    table = None
    results: list[tuple[int, pa.Table]] = []
    for number, bound in enumerate(statements, 1):
        explained = explained_sql(bound.statement)
        analyze = explained is not None and re.match(r"\s*ANALY[SZ]E\b", explained, re.IGNORECASE)
        if analyze:
            explained = explained[analyze.end() :]
        if explained is not None and _has_ai(explained, request.dialect):
            # EXPLAIN of a statement with AI calls: aisql's plan (DuckDB's EXPLAIN cannot bind them).
            if analyze:
                raise AisqlError(
                    "EXPLAIN ANALYZE of a statement with AI calls is not supported",
                    hint="run it with `aisql run --stats-json stats.json` for what each AI node did",
                )
            text = str(explain_script(con, session, explained, dialect=request.dialect))
            table = pa.table({"plan": text.splitlines()})
            results.append((number, table))
            continue
        executor.check(bound, source)
        stats = None
        if bound.has_ai and not request.naive:
            stats = MeasuredStatistics(con, session.facts, sampler=samples, embedding_model=session.embedding_model)
        where = "the query" if len(statements) == 1 else f"statement {number}"
        if budget is not None and stats is not None:
            # First against an estimate that runs no model (not even selectivity samples),
            # then against the sampled plan that will run.
            with stats.sampling_paused():
                _check_budget(plan_statement(bound, PlanningContext(stats)), stats, session, profile, budget, where)
        plan = plan_statement(bound, PlanningContext(stats))
        if budget is not None and stats is not None:
            _check_budget(plan, stats, session, profile, budget, where)
        result = executor.run(plan, bound, source, samples)
        nodes.extend(result.nodes)
        if result.table is not None:
            table = result.table
            if _returns_rows(bound.statement.ast):
                results.append((number, table))
    llm_nodes = [n for n in nodes if n.model_kind == "llm"]
    used = session.model_used() if nodes else None
    if used is not None and used.device is not None and session.pool is None:  # one engine's speed, not a pool's
        _remember_throughput(session, llm_nodes, "naive" if request.naive else "planned")
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
        worker_pool=[w.to_dict() for w in session.pool.worker_stats()] if session.pool is not None else [],
    )
    if results:
        table = results[-1][1]  # the last query's rows, not a later CREATE's row count
    return QueryResult(table=table, stats=stats, model=used, results=results)


def _returns_rows(ast) -> bool:
    """A statement whose rows are its result (a query, DESCRIBE, SHOW, PRAGMA ...), as the duckdb
    CLI prints them; CREATE ... AS, INSERT and the like return only a count here."""
    from sqlglot import exp

    if isinstance(ast, (exp.Create, exp.Insert, exp.Update, exp.Delete, exp.Merge, exp.Copy, exp.Drop, exp.Alter)):
        return False
    return not (isinstance(ast, exp.Query) and ast.args.get("into") is not None)


def calibrated(profile: Hardware, measured: "throughput.Measured | None") -> Hardware:
    """The profile with this model's measured speed from earlier runs, when there is one."""
    if measured is None or measured.planned_tokens_per_s is None:
        return profile
    return dataclasses.replace(profile, planned_tokens_per_s=measured.planned_tokens_per_s, naive_tokens_per_s=measured.naive_tokens_per_s)


def _measured_here(profile: Hardware, session: ModelSession) -> "throughput.Measured | None":
    """Runs measured this machine: they price its own profile only, never a GPU profile."""
    return throughput.lookup(session.fingerprint()) if profile.name == session.default_hardware() else None


def _remember_throughput(session: ModelSession, nodes, mode: str) -> None:
    tokens = sum(n.computed_tokens for n in nodes)
    seconds = sum(n.wall_s for n in nodes)
    throughput.record(session.fingerprint(), mode, tokens, seconds, load_s=session.load_s)


def _has_ai(sql_text: str, dialect: str | None) -> bool:
    try:
        return any(bound.has_ai for bound in bind_script(SourceText(sql_text), dialect))
    except AisqlError:
        return False  # DuckDB reports what is wrong with it


def call_notes(statements: list[BoundStatement]) -> list[str]:
    """The AI calls' notes (vendor arguments accepted and ignored), each once, in order."""
    return list(dict.fromkeys(note for bound in statements for call in bound.calls for note in call.notes))


def check_endpoints(statements: list[BoundStatement], session: ModelSession) -> None:
    """A model named in SQL (BigQuery's `endpoint =>`) must be the run's model: aisql runs one
    model per run, and silently answering with another would be a wrong answer."""
    named = [(bound, call) for bound in statements for call in bound.calls if call.endpoint]
    if not named:
        return
    model = session.resolved_model
    accepted = {model.name.lower(), model.name.rstrip("/").rsplit("/", 1)[-1].lower()}
    for _, call in named:
        if call.endpoint.lower() not in accepted:
            raise AisqlError(
                f"{call.spelling}: the model {call.endpoint!r} named in the query is not this run's model ({model.name})",
                line=call.line,
                col=call.col,
                hint=f"run with --model {call.endpoint} if aisql can load it, or leave the model out of the call",
            )


def explain_script(
    con: duckdb.DuckDBPyConnection,
    session: ModelSession,
    sql_text: str,
    *,
    hardware: str = "cpu",
    price_per_hour: float | None = None,
    sample: int = 0,
    dialect: str | None = None,
    params: Parameters = None,
    workers: int | None = None,
    checkpoint_every: int = 256,
) -> Explanation:
    """Plans of every statement with cost estimates, plan vs naive. No model weights are loaded
    unless `sample` > 0 asks to measure selectivities on that many prompts per AI predicate.
    `workers`: also each node's shard plan on that many engine workers (no Ray needed)."""
    source = SourceText(sql_text)
    statements = bind_script(source, dialect, params)
    check_endpoints(statements, session)
    sampler = SampleEvaluator(session.answering()) if sample else None
    stats = MeasuredStatistics(con, session.facts, sampler=sampler, sample_size=sample or 32, min_sampling_ratio=0.0, embedding_model=session.embedding_model)
    profile = hardware_profile(hardware, price_per_hour, cpu_calibration)
    measured = _measured_here(profile, session)
    profile = calibrated(profile, measured)
    plans = [plan_statement(bound, PlanningContext(stats)) for bound in statements]
    has_ai = any(p.nodes for p in plans)
    estimates = [estimate_plan(p, stats, profile) if p.nodes else None for p in plans]
    model = session.model_name() if has_ai else None  # its name as the user gave it, not a cache path
    explanation = Explanation(plans=plans, estimates=estimates, hardware=profile, model=model, load_s=measured.load_s if measured and has_ai else None)
    if workers:
        explanation.shard_plans = _shard_plans(plans, estimates, stats, workers, checkpoint_every)
    return explanation


def _shard_plans(plans, estimates, stats: MeasuredStatistics, workers: int, checkpoint_every: int) -> dict[str, dict]:
    """Each estimable node's prompts cut into shards for `workers` workers, from DuckDB's
    per-anchor counts and the token profile (no prompt rendered): aisql.executor.cluster.shard_plan."""
    from aisql.executor.cluster.shard_plan import estimated_groups, node_plan

    out: dict[str, dict] = {}
    for plan, estimate in zip(plans, estimates):
        for node in plan.nodes:
            est = estimate.node(node.id) if estimate else None
            if est is None or est.quality != "estimate" or not kind_of(node.call.function.request).shards:
                continue
            sizes, tokens = stats.leading_group_sizes(node), stats.token_profile(node)
            if not sizes or tokens is None:
                continue
            groups = estimated_groups(sizes, tokens, est.input_factor)
            out[node.id] = node_plan(groups, workers, checkpoint_every, est.plan.time_s or None)
    return out


def _check_budget(plan: Plan, stats: MeasuredStatistics, session: ModelSession, profile: Hardware, budget: Budget, where: str) -> None:
    """The planner's estimate of new work — its prompts less the share a sample finds in the
    result cache — must fit what is left of the budget."""
    estimate = estimate_plan(plan, stats, profile)
    prompts = usd = 0.0
    for node in plan.nodes:
        node_estimate = estimate.node(node.id)
        if node_estimate is None or node_estimate.quality != "estimate":
            continue
        new_share = 1.0 - _cached_share(node, stats, session)
        prompts += node_estimate.plan.prompts * new_share
        usd += node_estimate.plan.usd * new_share
    budget.check_estimate(prompts, usd, where)


def _cached_share(node, stats: MeasuredStatistics, session: ModelSession, size: int = 64) -> float:
    sample = stats.sample(node, size)
    if not sample:
        return 0.0
    texts = [node.call.template.render(values) for values, _ in sample]
    found = session.store.get_many(node.call.task.store_key(session.fingerprint()), texts)
    return len(found) / len(texts)
