"""Scale-out on Ray (issue 19): shard cutting along prefix groups, then a local Ray runtime with
two `tiny` workers — the same rows as one engine and as naive execution, computed tokens equal
to one engine's plus exactly the prefix work the split repeats, a worker killed mid-query, the
fingerprint check, the budget across shards in flight, and the CLI."""

from __future__ import annotations

import json
import sys

import pytest

from conftest import ROOT, load_example_tables

from aisql.errors import AisqlError, ModelError
from aisql.executor.cluster.pool import ClusterOptions
from aisql.executor.store.cache import open_answer_store
from aisql.executor.cluster.shards import PrefixLedger, prefix_groups
from aisql.executor.answers.request_kinds import Prepared
from aisql.executor.cluster.shard_plan import Group, ShardCutter, simulate, split_heavy

sys.path.insert(0, str(ROOT / "benchmarks"))
from datagen import tables  # noqa: E402
from run import QUERIES  # noqa: E402

pytestmark = pytest.mark.slow  # a local Ray runtime and engine workers


# ---- shard cutting (no Ray) -------------------------------------------------------------------


def _score_task():
    """An AI.IF task, as the planner builds one (for the output-token estimate only)."""
    import aisql

    con = aisql.connect(model="tiny", cache=False)
    plan = con.explain("SELECT AI.IF(PROMPT('{x}')) FROM (SELECT 'a' AS x)").plans[0]
    return plan.nodes[0].call.task


def test_groups_stay_whole_unless_heavier_than_a_fair_share():
    groups = [Group(10.0, 2), Group(100.0, 20), Group(30.0, 3)]
    assert split_heavy(groups, 1) == groups
    assert split_heavy([Group(10.0, 2), Group(50.0, 5), Group(40.0, 3)], 2) == [Group(10.0, 2), Group(50.0, 5), Group(40.0, 3)]
    groups = [Group(10.0, 2), Group(200.0, 20), Group(30.0, 3)]
    pieces = split_heavy(groups, 2)
    assert len(pieces) == 4 and sum(p.prompts for p in pieces) == 25
    assert sum(p.weight for p in pieces) == pytest.approx(240.0)


def test_cutter_hands_out_every_group_once_biggest_shards_first():
    groups = [Group(1.0, 1, i) for i in range(100)]
    cutter = ShardCutter(groups, workers=4, shard_prompts=1000)
    shards = []
    while (shard := cutter.next()) is not None:
        shards.append(shard)
    handed = [g.payload for shard in shards for g in shard]
    assert handed == list(range(100))
    sizes = [len(s) for s in shards]
    assert sizes[0] == 13 and sizes == sorted(sizes, reverse=True) and sizes[-1] == 1
    capped = ShardCutter(groups, workers=1, shard_prompts=8)
    assert len(capped.next()) == 8  # never more prompts than a checkpoint


def test_cutter_prefers_a_workers_own_groups_and_steals_last():
    groups = [Group(1.0, 1, ("w0", i), "w0") for i in range(6)] + [Group(1.0, 1, ("w1", i), "w1") for i in range(2)]
    cutter = ShardCutter(groups, workers=1, shard_prompts=2)
    assert [g.payload for g in cutter.next("w1")] == [("w1", 0), ("w1", 1)]
    assert [g.payload for g in cutter.next("w0")] == [("w0", 0), ("w0", 1)]
    stolen = cutter.next("w1")  # w1 has nothing of its own left: it takes from the end of w0's
    assert [g.payload for g in stolen] == [("w0", 4), ("w0", 5)]
    cutter.put_back(stolen)  # its worker died: first in line again
    assert [g.payload for g in cutter.next("w0")] == [("w0", 4), ("w0", 5)]
    assert [g.payload for g in cutter.next("w0")] == [("w0", 2)]  # the tail: smaller shards
    assert [g.payload for g in cutter.next("w1")] == [("w0", 3)]
    assert cutter.next("w0") is None and not cutter


def test_simulated_plan_balances_many_groups_and_respects_the_largest():
    many = simulate([Group(float(1 + i % 7), 1 + i % 7) for i in range(5000)], workers=64, shard_prompts=256)
    assert many.balance > 0.97 and sum(many.worker_prompts) == sum(1 + i % 7 for i in range(5000))
    lopsided = simulate([Group(100.0, 10)] + [Group(1.0, 1)] * 10, workers=4, shard_prompts=256)
    assert lopsided.split_groups == 1  # 100 of 110 tokens: split into pieces of a fair share
    assert lopsided.makespan <= 110 / 4 + 1e-9 or lopsided.makespan == pytest.approx(max(lopsided.shard_weights))


def test_prefix_groups_cut_where_neighbours_share_only_the_common_prefix():
    task = _score_task()
    items = [Prepared(f"t{i}", ids) for i, ids in enumerate([(1, 2, 5, 6), (1, 2, 5, 7), (1, 2, 9), (1, 2, 9, 4), (1, 2, 3)])]
    groups = prefix_groups(items, task, workers=2)
    assert [[p.ids for p in g.payload] for g in groups] == [[(1, 2, 3)], [(1, 2, 5, 6), (1, 2, 5, 7)], [(1, 2, 9), (1, 2, 9, 4)]]
    ledger = PrefixLedger()
    assert ledger.add("w0", [(1, 2, 5, 6), (1, 2, 5, 7)]) == 0
    assert ledger.add("w1", [(1, 2, 9), (1, 2, 9, 4)]) == 2  # w1 computes the shared (1, 2) again
    assert ledger.add("w0", [(1, 2, 9, 8)]) == 1  # w0 computes 9 (w1 had it) and 8 (new to all)
    assert trie_tokens([(1, 2, 5, 6), (1, 2, 5, 7), (1, 2, 9), (1, 2, 9, 4), (1, 2, 9, 8)]) == 8
    assert ledger.holder((1, 2, 9, 4, 4), beyond=2) == "w1"
    assert ledger.holder((1, 2, 7), beyond=2) is None


def test_cluster_options_read_counts_and_addresses(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert ClusterOptions.from_user(None, None) is None
    assert ClusterOptions.from_user(3) == ClusterOptions(workers=3)
    assert ClusterOptions.from_user("ray://head:10001", 8) == ClusterOptions(workers=8, address="ray://head:10001")
    monkeypatch.setenv("RAY_ADDRESS", "ray://elsewhere:10001")
    assert ClusterOptions.from_user(None, 2).address == "ray://elsewhere:10001"  # read only with --workers
    for bad in ("not an address", True, 2.5):
        with pytest.raises(AisqlError):
            ClusterOptions.from_user(bad)
    with pytest.raises(AisqlError, match="whole number"):
        ClusterOptions.from_user(None, 0)
    monkeypatch.delenv("RAY_ADDRESS")
    with pytest.raises(AisqlError, match="worker count"):
        ClusterOptions.from_user("local")


def test_explain_shows_the_shard_plan_without_starting_anything(make_connection):
    ray_before = "ray" in sys.modules
    con = make_connection()
    explanation = con.explain(QUERIES["Q1_hot_leads"].replace("c.segment = 'retail' AND ", ""), workers=2)
    (node,) = explanation.to_dict()["statements"][0]["ai_nodes"]
    plan = node["shard_plan"]
    customers = con.duckdb.execute("SELECT count(DISTINCT profile) FROM customers").fetchall()[0][0]
    assert plan["workers"] == 2 and plan["prefix_groups"] == customers and plan["split_groups"] == 0
    assert plan["shards"] >= 2 and 0.9 < plan["balance"] <= 1.0 and plan["speedup"] > 1.8
    assert "shards on 2 workers" in str(explanation)
    assert ("ray" in sys.modules) == ray_before  # a simulation: nothing of Ray imported


# ---- a local Ray runtime with two tiny workers ---------------------------------------------------


@pytest.fixture(scope="module")
def ray_runtime():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=96 * 1024 * 1024, logging_level="error", log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def data():
    return tables(scale=0.25)


def _load(con, data) -> None:
    for name, table in data.items():
        con.duckdb.register(f"__{name}", table)
        con.duckdb.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM __{name}")


def _rows(result) -> list:
    return sorted(map(repr, result.table.to_pylist()))


def test_cli_runs_on_workers_and_reports_each(ray_runtime, tmp_path):
    from test_cli import HOT_LEADS, run_cli

    stats = tmp_path / "stats.json"
    result = run_cli("run", HOT_LEADS, "--model", "tiny", "--workers", "2", "--stats-json", str(stats), "--format", "csv")
    assert result.exit_code == 0, result.output
    reference = run_cli("run", HOT_LEADS, "--model", "tiny", "--format", "csv")
    assert sorted(result.stdout.splitlines()) == sorted(reference.stdout.splitlines())
    data = json.loads(stats.read_text())
    assert set(data["workers"]) == {"w0", "w1"}
    assert sum(w["prompts"] for w in data["workers"].values()) == data["prompts_evaluated"] > 0
    assert "workers: w0" in result.stderr and "(Ray)" in result.stderr


def test_a_worker_with_another_model_fails_before_any_answer_is_stored(ray_runtime, tmp_path, monkeypatch):
    import aisql
    from aisql.engine.model.resolving import ResolvedModel

    monkeypatch.setattr(ResolvedModel, "fingerprint", lambda self, options: "driver-has-another-model")
    con = aisql.connect(model="tiny", cache=tmp_path / "answers.sqlite", cluster=1)
    load_example_tables(con)
    with pytest.raises(ModelError, match="loaded a different model"):
        con.run("SELECT id FROM reviews WHERE AI.IF(PROMPT('{review} is positive'))")
    con.close()
    monkeypatch.undo()
    fresh = aisql.connect(model="tiny", cache=tmp_path / "answers.sqlite")
    assert fresh.store.stats()["entries"] == 0
    fresh.close()


def test_more_workers_than_the_runtime_holds_is_refused_at_once(ray_runtime):
    import aisql

    con = aisql.connect(model="tiny", cache=False, cluster=3)
    with pytest.raises(AisqlError, match="3 workers need 3 CPUs and the local Ray runtime has 2"):
        con.run("SELECT AI.IF(PROMPT('{x} is a fruit')) FROM (SELECT 'pear' AS x)")
    con.close()


@pytest.fixture(scope="module")
def pool_con(ray_runtime, data):
    import aisql

    con = aisql.connect(model="tiny", cache=False, cluster=2)
    _load(con, data)
    yield con
    con.close()


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_benchmark_queries_equal_one_engine_and_naive(pool_con, tiny_engine, data, name):
    one, naive = _one_engine_and_naive(pool_con, tiny_engine, data, QUERIES[name])
    seen = []
    ledger_add = pool_con.engine.ledger.add
    pool_con.engine.ledger.add = lambda worker, seqs: (seen.extend(seqs), ledger_add(worker, seqs))[1]
    try:
        spread = pool_con.run(QUERIES[name], checkpoint_every=8)
    finally:
        pool_con.engine.ledger.add = ledger_add
    assert _rows(spread) == _rows(one) == _rows(naive)
    totals, reference = spread.stats.totals(), one.stats.totals()
    assert totals["prompts_evaluated"] == reference["prompts_evaluated"]
    assert totals["logical_tokens"] == reference["logical_tokens"]
    recompute = sum(n.prefix_recompute_tokens for n in spread.stats.nodes)
    # Every token the workers computed beyond one engine is a prefix the split made a second
    # worker compute, counted exactly by the driver.
    assert totals["computed_tokens"] == reference["computed_tokens"] + recompute
    workers = spread.stats.workers()
    assert sum(w["prompts"] for w in workers.values()) == totals["prompts_evaluated"]
    if name.startswith("Q1"):
        # One node, groups kept whole: the only repeat is what every prompt shares (the
        # instruction and framing), once per extra worker.
        shared = min(_common(a, b) for a, b in zip(sorted(seen), sorted(seen)[1:]))
        assert len(workers) == 2 and recompute == shared


def _one_engine_and_naive(pool_con, tiny_engine, data, sql):
    """`sql` on one tiny engine, planned and naive; then the pool's caches emptied for the run
    compared with them."""
    from aisql.api import Connection

    single = Connection(engine=tiny_engine, cache=False)
    _load(single, data)
    tiny_engine.reset_cache()
    one, naive = single.run(sql), single.run(sql, naive=True)
    pool_con.engine.reset_cache()
    pool_con.session.store = open_answer_store(False)
    return one, naive


def trie_tokens(sequences) -> int:
    """Distinct prefixes of `sequences` (the prompt tokens one engine computes for them)."""
    return len({tuple(s[:i]) for s in sequences for i in range(1, len(s) + 1)})


def _common(a, b) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_a_worker_killed_mid_query_loses_and_repeats_nothing(pool_con, ray_runtime):
    query = QUERIES["Q2_reviews"]
    pool_con.session.store = open_answer_store(False)
    reference = pool_con.run(query)
    pool_con.engine.reset_cache()
    store = pool_con.session.store = open_answer_store(False)
    writes: dict[str, int] = {}
    put_many = store.put_many

    def counting_put_many(key, answers):
        for text in answers:
            writes[text] = writes.get(text, 0) + 1
        put_many(key, answers)

    store.put_many = counting_put_many
    pool = pool_con.session.pool
    result, killed = _run_killing_the_third_shards_worker(pool_con, ray_runtime, query)
    assert killed and _rows(result) == _rows(reference)
    evaluated = result.stats.totals()["prompts_evaluated"]
    assert evaluated == reference.stats.totals()["prompts_evaluated"]
    assert len(writes) == evaluated and set(writes.values()) == {1}  # every answer stored once
    assert sum(w["prompts"] for w in result.stats.workers().values()) == evaluated
    deaths = {w["name"]: w["deaths"] for w in result.stats.to_dict()["worker_pool"]}
    assert deaths[killed[0]] == 1
    pool.wait_ready()  # the replacement joins with its model loaded and its fingerprint checked
    assert all(s.alive for s in pool.slots)
    again = pool_con.run(QUERIES["Q3_classify"])
    assert again.table.num_rows > 0


def _run_killing_the_third_shards_worker(pool_con, ray_runtime, query):
    """`query` on the pool, the worker of the third shard handed out killed while it runs it:
    the result and the killed worker's name (in a list, empty if no third shard came)."""
    pool = pool_con.session.pool
    dispatched, killed = [], []

    def kill_the_third(name, actor, prompts):
        dispatched.append(name)
        if len(dispatched) == 3:  # the shard just handed out is still running: kill its worker
            killed.append(name)
            ray_runtime.kill(actor)

    pool.on_dispatch = kill_the_third
    try:
        return pool_con.run(query, checkpoint_every=8), killed
    finally:
        pool.on_dispatch = None


def test_max_prompts_holds_with_shards_in_flight(pool_con):
    """Shards in flight reserve their prompts: the workers never answer past --max-prompts."""
    import threading

    from aisql.executor.answers.answering import Answering, RunOptions
    from aisql.executor.cluster.sharded import PoolShards
    from aisql.executor.store.answer_store import MemoryAnswerStore
    from aisql.executor.options.budget import Budget, BudgetExceeded

    store = MemoryAnswerStore()
    options = RunOptions.of(budget=Budget(max_prompts=10), checkpoint_every=4)
    answering = Answering(lambda: pool_con.engine, store, threading.RLock(), options=options, runner=PoolShards())
    counts = {f"review number {i} says the parcel came late": 1 for i in range(40)}
    with pytest.raises(BudgetExceeded, match="--max-prompts 10") as stop:
        answering.answer_texts(counts, _score_task(), seen=set(), progress=("n1", "AI.IF"), key="budget-test")
    assert len(store) == stop.value.counts.prompts_evaluated == 10  # exactly the limit answered, and kept


def test_worker_and_raylet_lines_never_reach_stdout(capsys, monkeypatch):
    """Ray forwarded '(raylet) A worker died ...' to the driver's stdout, inside a CSV written
    with `--format csv > out.csv`: the pool sends every forwarded line to stderr."""
    ray_worker = pytest.importorskip("ray._private.worker")
    from aisql.executor.cluster import pool

    monkeypatch.setattr(ray_worker, "print_to_stdstream", ray_worker.print_to_stdstream)  # restored afterwards
    assert pool._worker_logs_to_stderr() is True
    line = {"ip": "127.0.0.1", "pid": "raylet", "lines": ["A worker died or was killed while executing a task"], "is_err": False, "job": "01", "actor_name": "", "task_name": ""}
    ray_worker.print_to_stdstream(line, ignore_prefix=False)
    captured = capsys.readouterr()
    assert captured.out == "" and "A worker died" in captured.err


# ---- a large node streamed in slices (issue 31), on the same Ray workers ---------------------


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_streamed_nodes_equal_one_engine_and_naive(pool_con, tiny_engine, data, name, monkeypatch):
    """Every node streamed (STREAM_AT 0), slices of 16 tuples: the rows of one engine and naive,
    the same prompts and logical tokens; the workers encoded every prompt (run_texts)."""
    from aisql.executor.cluster import streamed_input

    monkeypatch.setattr(streamed_input, "STREAM_AT", 0)
    monkeypatch.setattr(streamed_input, "SLICE_ROWS", 16)
    one, naive = _one_engine_and_naive(pool_con, tiny_engine, data, QUERIES[name])
    spread = pool_con.run(QUERIES[name], checkpoint_every=8)
    assert _rows(spread) == _rows(one) == _rows(naive)
    totals, reference = spread.stats.totals(), one.stats.totals()
    for counted in ("prompts_total", "prompts_unique", "prompts_evaluated", "logical_tokens"):
        assert totals[counted] == reference[counted], counted
    assert {n.strategy for n in spread.stats.nodes} <= {"prefetch-sliced", "streaming"}
    assert sum(w["prompts"] for w in spread.stats.workers().values()) == totals["prompts_evaluated"]


def test_a_worker_killed_mid_stream_loses_and_repeats_nothing(pool_con, ray_runtime, tmp_path, monkeypatch):
    """A streamed node on a result-cache file (its answers committed by the writer process): a
    worker killed with a shard in flight; every answer is stored exactly once."""
    import sqlite3

    from aisql.executor.cluster import streamed_input

    monkeypatch.setattr(streamed_input, "STREAM_AT", 0)
    monkeypatch.setattr(streamed_input, "SLICE_ROWS", 16)
    query = QUERIES["Q2_reviews"]
    pool_con.session.store = open_answer_store(False)
    reference = pool_con.run(query)
    pool_con.engine.reset_cache()
    path = tmp_path / "answers.sqlite"
    pool_con.session.store = open_answer_store(str(path))
    pool = pool_con.session.pool
    result, killed = _run_killing_the_third_shards_worker(pool_con, ray_runtime, query)
    assert killed and _rows(result) == _rows(reference)
    evaluated = result.stats.totals()["prompts_evaluated"]
    assert evaluated == reference.stats.totals()["prompts_evaluated"]
    stored = sqlite3.connect(path).execute("SELECT count(*), count(DISTINCT key) FROM answers").fetchone()
    assert stored == (evaluated, evaluated) and pool_con.session.store.committed == evaluated
    pool.wait_ready()
