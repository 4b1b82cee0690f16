"""explain prices a query from the engine's measured speed with this model (aisql.executor.throughput)."""

from __future__ import annotations

import aisql
from aisql.executor import throughput


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
