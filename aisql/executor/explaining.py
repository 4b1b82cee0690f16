"""`aisql explain`: every statement's plan with cost estimates, plan next to naive, and (with
--workers) each node's shard plan. No model weights are loaded unless a sample is asked for."""

from __future__ import annotations

import duckdb

from aisql.engine.model.calibrate import cpu_calibration
from aisql.executor import throughput
from aisql.executor.measured_statistics import MeasuredStatistics
from aisql.executor.request_kinds import kind_of
from aisql.executor.script import bind_script, check_endpoints
from aisql.executor.selectivity_samples import SampleEvaluator
from aisql.executor.session import ModelSession
from aisql.planner import PlanningContext, plan_statement
from aisql.planner.cost import estimate_plan
from aisql.planner.explain import Explanation
from aisql.planner.hardware import hardware_profile
from aisql.sql.parameters import Parameters
from aisql.sql.source import SourceText


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
    measured = throughput.measured_here(profile, session)
    profile = throughput.calibrated(profile, measured)
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
