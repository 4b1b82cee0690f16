"""`aisql explain`: every statement's plan with cost estimates, plan next to naive, and (with
--workers) each node's shard plan. No model weights are loaded unless a sample is asked for."""

from __future__ import annotations

import contextlib
import dataclasses

import duckdb

from aisql.engine.model.calibrate import cpu_calibration
from aisql.errors import AisqlError
from aisql.executor.estimates import throughput
from aisql.executor.estimates.measured_statistics import MeasuredStatistics
from aisql.executor.answers.request_kinds import kind_of
from aisql.executor.script import bind_script, check_endpoints, constants_of
from aisql.executor.estimates.selectivity_samples import SampleEvaluator
from aisql.executor.session import ModelSession
from aisql.functions.arguments import constants_from
from aisql.planner import PlanningContext, plan_statement
from aisql.planner.cost import Side, estimate_plan
from aisql.planner.explain import Explanation
from aisql.planner.hardware import hardware_profile
from aisql.planner.plan import NodeRole
from aisql.executor.options.run_options import RunRequest
from aisql.sql.source import SourceText


def explain_script(
    con: duckdb.DuckDBPyConnection,
    session: ModelSession,
    sql_text: str,
    request: RunRequest | None = None,
    *,
    sample: int = 0,
    workers: int | None = None,
) -> Explanation:
    """Plans of every statement with cost estimates, plan vs naive, under the run options a run
    of them would take (`request`: its dialect, parameters, hardware and price, --model-map,
    checkpoint_every as the shards' size). No model weights are loaded unless `sample` > 0 asks
    to measure selectivities on that many prompts per AI predicate. `workers`: also each node's
    shard plan on that many engine workers (no Ray needed)."""
    request = request or RunRequest()
    source = SourceText(sql_text)
    with constants_from(constants_of(con)):
        statements = bind_script(source, request.dialect, request.params, request.flock)
    routes = check_endpoints(statements, session, model_map=request.model_map)
    stats = _statistics(con, session, sample)
    base_profile = hardware_profile(request.hardware or "cpu", request.price_per_hour, cpu_calibration)
    measured = throughput.measured_here(base_profile, session)
    profile = throughput.calibrated(base_profile, measured)
    plans = [plan_statement(bound, PlanningContext(stats)) for bound in statements]
    has_ai = any(p.nodes for p in plans)
    estimates = [_priced(p, stats, profile, session) if p.nodes else None for p in plans]
    _price_routed_calls(con, session, plans, estimates, routes, base_profile, sample)
    cache_note = None
    if has_ai and session.known_fingerprint() is None:
        cache_note = "result cache not consulted: this model's numerics (--dtype auto) are measured by its first run"
    model = session.model_name() if has_ai else None  # its name as the user gave it, not a cache path
    all_cached = has_ai and all(
        est.cached_share == 1.0 for e in estimates if e for est in e.nodes if est.quality == "estimate"
    ) and any(est.quality == "estimate" for e in estimates if e for est in e.nodes)
    load_s, load_from = _load_figure(session, measured, has_ai and not all_cached)
    explanation = Explanation(
        plans=plans,
        estimates=estimates,
        hardware=profile,
        model=model,
        load_s=load_s,
        load_estimated_from=load_from,
        cache_note=cache_note or ("every answer is in the result cache: no model load, no model time" if all_cached else None),
        measured_load=measured.load if measured else None,
    )
    explanation.first_run = _first_run(session, profile, has_ai and not all_cached)
    explanation.overhead_s = measured.overhead_s if measured is not None and has_ai and not all_cached else None
    explanation.proxies = _proxies(plans, session, con)
    explanation.decisions = _decisions(plans, session, con)
    explanation.notes = routes.notes
    if workers:
        explanation.shard_plans = _shard_plans(plans, estimates, stats, workers, request.checkpoint_every)
    return explanation


def _price_routed_calls(con, session: ModelSession, plans, estimates, routes, base_profile, sample: int) -> None:
    """A call --model-map sends to another model is priced as that model runs it: its tokenizer,
    its size, its measured speed here, its own result-cache entries (the run's model would price
    a 1.5B model's calls at a tiny model's cost). Replaces those calls' estimates in place."""
    for spec in sorted(set(routes.by_call.values())):
        other = session.proxy_session(spec)
        other_stats = _statistics(con, other, sample)
        other_profile = throughput.calibrated(base_profile, throughput.measured_here(base_profile, other))
        for p, e in zip(plans, estimates):
            if e is None or not any(routes.by_call.get(n.call.function_name) == spec for n in p.nodes):
                continue
            theirs = _priced(p, other_stats, other_profile, other)
            e.nodes = [
                theirs.nodes[i] if routes.by_call.get(node.call.function_name) == spec else est
                for i, (node, est) in enumerate(zip(p.nodes, e.nodes))
            ]


def _statistics(con: duckdb.DuckDBPyConnection, session: ModelSession, sample: int) -> MeasuredStatistics:
    """What the planner knows of the data, counted in `session`'s model's tokens (and, with
    --sample, its answers)."""
    sampler = SampleEvaluator(session.answering()) if sample else None
    return MeasuredStatistics(con, session.facts, sampler=sampler, sample_size=sample or 32, min_sampling_ratio=0.0, embedding_model=session.embedding_model)


def _priced(plan, stats: MeasuredStatistics, profile, session: ModelSession):
    """The plan's estimate on `session`'s model, less what its result cache already holds."""
    estimate = estimate_plan(plan, stats, profile)
    fingerprint = session.known_fingerprint()
    return _less_cached(plan, estimate, stats, session.store, fingerprint) if fingerprint is not None else estimate


def _load_figure(session: ModelSession, measured, has_ai: bool) -> tuple[float | None, int | None]:
    """(the model's load time, None when measured — else how many loads of other models here it
    is estimated from). A model never loaded here (a new GGUF) gets an estimate, not nothing."""
    if not has_ai or session.loaded:
        return None, None
    if measured is not None and measured.load_s is not None:
        return measured.load_s, None
    try:
        weight_bytes = session.facts().profile.weight_bytes
    except AisqlError:
        return None, None
    estimate = throughput.estimated_load(weight_bytes)
    return (estimate[0], estimate[1]) if estimate else (throughput.reference_load(weight_bytes), 0)


def _first_run(session: ModelSession, profile, has_ai: bool) -> list:
    """One-time work the run will do before its first answer, when it will: a GGUF file's
    conversion, the number-format trial (--dtype auto meeting this model on a bfloat16 CPU)."""
    from pathlib import Path

    from aisql.engine.model import first_run
    from aisql.engine.model.auto_numerics import trial_tokens
    from aisql.engine.model.gguf import is_converted

    if not has_ai or session.loaded:
        return []
    try:
        model = session.model_for_planning()
    except AisqlError:
        return []
    costs = []
    if model.backend == "gguf" and not is_converted(Path(model.location)):
        costs.append(first_run.conversion_estimate(session.facts().profile.weight_bytes))
    if model.backend in ("hf", "gguf") and session.known_fingerprint() is None:
        rate, how = profile.planned_tokens_per_s, profile.speed_source or "measured"
        if not rate:
            params = session.facts().profile.params
            rate, how = profile.peak_flops * profile.efficiency / (2.0 * params), "from the FLOP model"
        costs.append(first_run.numerics_trial_estimate(trial_tokens(), rate, how))
    return costs


def _less_cached(plan, estimate, stats: MeasuredStatistics, store, fingerprint: str):
    """The estimate with each node's cached share (a sample looked up in the result cache, as
    --max-prompts counts it) taken off its planned prompts, tokens, time and money. Naive
    execution never reads the cache, so its side stays whole."""
    from aisql.executor.store.cached_share import cached_share

    nodes = []
    for est in estimate.nodes:
        node = next((n for n in plan.nodes if n.id == est.node), None)
        found = cached_share(node, stats, store, fingerprint) if node is not None and est.quality == "estimate" else None
        if found is None or found.share == 0.0:
            nodes.append(est)
            continue
        rest = 1.0 - found.share
        side = est.plan
        nodes.append(
            dataclasses.replace(
                est,
                plan=Side(*(x * rest for x in dataclasses.astuple(side))),
                cached_share=found.share,
                cached_share_exact=found.exact,
            )
        )
    return dataclasses.replace(estimate, nodes=nodes)


def _shard_plans(plans, estimates, stats: MeasuredStatistics, workers: int, shard_prompts: int) -> dict[str, dict]:
    """Each estimable node's prompts cut into shards for `workers` workers, from DuckDB's
    per-anchor counts and the token profile (no prompt rendered): aisql.executor.cluster.shard_plan."""
    from aisql.executor.cluster import streamed_input
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
            out[node.id] = node_plan(groups, workers, shard_prompts, est.plan.time_s or None)
            # a run streams a node this large through the pool in slices (the driver encodes
            # nothing): decided from the count the run decides from, where it can be made now
            distinct = est.prompts_unique
            if node.estimate_sql is not None and est.input_factor == 1.0:
                with contextlib.suppress(duckdb.Error):  # not countable before the script runs: the estimate says
                    distinct = streamed_input.count_input(stats.con, node.estimate_sql, node.call.arity)
            out[node.id]["sliced"] = streamed_input.streams(distinct)
    return out


def _decisions(plans, session: ModelSession, con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Per node with labelled examples: the rule they choose and each candidate's quality on them
    when every example is in the result cache (nothing asked, nothing loaded), else what is left
    to ask (aisql.executor.node.decisions.explain_examples)."""
    from aisql.executor.node import decisions
    from aisql.executor.store.answer_store import reader_of
    from aisql.executor.report.signals import examples_line

    out: dict[str, str] = {}
    fingerprint = None
    for plan in plans:
        for node in plan.nodes:
            if decisions.source_of(node.call) != "examples":
                continue
            fingerprint = fingerprint or session.known_fingerprint()
            if fingerprint is None:
                continue  # the numerics are measured by the first run: the cache cannot be keyed yet

            def lookup(task, texts, fingerprint=fingerprint):
                return session.store.get_many(task.store_key(fingerprint), texts, reader_of(task))

            try:
                report = decisions.explain_examples(con, node.call, node.call.task, lookup, reads_states=session.reads_states())
            except AisqlError as err:
                out[node.id] = f"labelled examples cannot be used: {err.message}"
                continue
            if "missing" in report:
                per_label = ", ".join(f"{count} {label}" for label, count in report["per_label"].items())
                out[node.id] = (
                    f"answers under labels: {report['examples']} labelled examples ({per_label}), {report['missing']} not yet asked "
                    "(not in these estimates): the rule and its quality on them are chosen when the query runs"
                )
            else:
                out[node.id] = examples_line(report)
    return out


def _proxies(plans, session: ModelSession, con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Per AI.IF node in approximate mode: the proxy a run would use, and why (nothing loaded)."""
    from aisql.planner.approximation import call_targets

    out = {}
    for plan in plans:
        for node in plan.nodes:
            targets = call_targets(node.call.function.approximates, node.call.hints, None)
            if targets is None:
                continue
            join = _join_line(con, node, targets, session) if node.role is NodeRole.JOIN else None
            if join is not None:
                out[node.id] = join
                continue
            choice = session.choose_proxy(targets.proxy)
            out[node.id] = f"{choice.name} ({choice.why})"
    return out


def _join_line(con: duckdb.DuckDBPyConnection, node, targets, session: ModelSession) -> str | None:
    """An AI join's strategy in approximate mode, from its sides' distinct values counted by
    DuckDB on the node's input with no AI answer known (aisql.executor.joins.join_rewrite)."""
    from aisql.executor.joins import join_rewrite
    from aisql.planner.plan import ARG_PREFIX

    groups = join_rewrite.sides(node.call.argument_tables)
    if groups is None or node.estimate_sql is None:
        return None
    distinct = ", ".join("count(DISTINCT ({}))".format(", ".join(f"{ARG_PREFIX}{i}" for i in group)) for group in groups)
    try:
        counts = con.sql(f"SELECT {distinct} FROM ({node.estimate_sql})").fetchall()[0]  # both sides in one scan
    except duckdb.Error:
        return None
    rows, candidates = max(counts), min(counts)
    try:
        has_embeddings = session.embedding_model() is not None
    except AisqlError:
        has_embeddings = False
    strategy, why = join_rewrite.choose_strategy(targets.join, candidates, join_rewrite.too_many(candidates), has_embeddings)
    return join_rewrite.plan_line(strategy, why, rows, candidates)
