"""A node streamed through a worker pool in slices (issue 31): the input read from DuckDB in
anchor order a slice at a time, prompts encoded by the workers, answers kept by digest.

No Ray here: the pool is an inline one running a real EngineWorker on the tiny engine in this
process (tests/test_scale_out.py runs the Ray pool). The product path is the real one —
NodeRuntime, the streaming driver, the worker's run_texts, the final query's lookups."""

from __future__ import annotations

import duckdb
import pytest

from aisql.executor.store.answer_index import MISSING, AnswerIndex, digest
from aisql.executor.cluster import streamed_input
from aisql.executor.cluster.streamed_input import SliceCounts, leading_args, stream_groups
from aisql.sql.template import parse_template

# ---- the answer index ----------------------------------------------------------------------


def test_the_index_keeps_first_answers_and_finds_them_after_merges():
    index = AnswerIndex()
    keys = [digest(f"prompt {i}") for i in range(1000)]
    for start in range(0, 1000, 37):  # many runs, merged as they grow
        batch = keys[start : start + 37]
        add = index.add_new if start % 2 else index.add_many
        add(batch, [i % 3 == 0 for i in range(start, start + len(batch))], list(range(start, start + len(batch))))
    assert len(index._runs) < 8
    assert index.add_many(keys[:5] + [digest("new"), digest("new")], [None] * 7, [0] * 7) == [0, 1, 1, 0, 1, 2, 2]  # first answers' codes
    assert len(index) == 1001
    assert index.get_many(keys) == [i % 3 == 0 for i in range(1000)]
    assert index.costs(keys[:3] + [digest("never")]) == [0, 1, 2, None]
    assert index.get_many([digest("never"), digest("new")]) == [MISSING, None]
    assert digest("prompt 7") in index and digest("prompt x") not in index
    assert index.nbytes < 1001 * 32  # tens of bytes a prompt, not its text


def test_keys_sharing_their_first_eight_bytes_are_told_apart():
    shared = b"\x01" * 8
    index = AnswerIndex()
    index.add_many([shared + b"\x02" * 8], ["a"], [1])
    index.add_new([shared + b"\x03" * 8, shared + b"\x00" * 8, b"\x00" * 16], ["b", "c", "d"], [2, 3, 4])
    assert index.get_many([shared + b"\x02" * 8, shared + b"\x03" * 8, shared + b"\x00" * 8, shared + b"\x09" * 8]) == ["a", "b", "c", MISSING]


# ---- slices of prefix groups -----------------------------------------------------------------


def _pairs(con, customers: int, products: int) -> str:
    con.execute(f"CREATE OR REPLACE TABLE c AS SELECT i AS id, 'customer ' || i || ' likes tea' AS profile FROM range({customers}) t(i)")
    con.execute(f"CREATE OR REPLACE TABLE p AS SELECT i AS id, 'product ' || i AS description FROM range({products}) t(i)")
    # the planner's shape of a node's input (aisql.planner.inputs)
    return (
        "SELECT __aisql_a0, __aisql_a1, COUNT(*) AS __aisql_n FROM (SELECT c.profile AS __aisql_a0, "
        "p.description AS __aisql_a1 FROM c, p) AS __aisql_input GROUP BY __aisql_a0, __aisql_a1"
    )


def test_slices_hold_whole_groups_in_anchor_order():
    con = duckdb.connect()
    sql = _pairs(con, 7, 5)
    template = parse_template("{0} might buy {1}")
    counts = SliceCounts()
    slices = list(stream_groups(con, sql, template, 2, leading_args(template, ()), counts, slice_rows=6, total=35))  # ranges, batches mid-group
    groups = [g for s in slices for g in s]
    assert len(slices) > 1 and counts.rows_in == 35
    assert [g.lead for g in groups] == sorted({(f"customer {i} likes tea",) for i in range(7)})  # each anchor once: whole
    assert all(len(g.texts) == 5 and g.texts == sorted(g.texts) for g in groups)
    assert groups[0].texts[0] == "customer 0 likes tea might buy product 0"


def test_a_group_larger_than_a_slice_is_cut_and_nulls_are_counted_not_sent():
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT 'same lead' AS __aisql_a0, CASE WHEN i = 3 THEN NULL ELSE 'tail ' || i END AS __aisql_a1, 2 AS n FROM range(10) t(i)")
    template = parse_template("{0}: {1}")
    counts = SliceCounts()
    groups = [g for s in stream_groups(con, "SELECT * FROM t", template, 2, (0,), counts, slice_rows=4) for g in s]
    assert counts.rows_in == 20 and counts.null_rows == 2
    assert sum(len(g.texts) for g in groups) == 9 and max(len(g.texts) for g in groups) == 4  # memory bounded by a slice
    assert sum(sum(g.rows) for g in groups) == 18


def test_ranges_of_the_lead_cover_the_input_once_in_order():
    from aisql.executor.cluster.streamed_input import slice_ranges

    con = duckdb.connect()
    sql = _pairs(con, 50, 4)
    con.execute("INSERT INTO c VALUES (99, NULL)")
    ranges = slice_ranges(con, sql, (0,), total=204, slice_rows=40)
    assert 4 <= len(ranges) <= 7 and ranges[-1][0].endswith("IS NULL")
    seen = []
    for where, params in ranges:
        seen += [r[0] for r in con.sql(f"SELECT * FROM ({sql}) AS q{where} ORDER BY 1, 2", params=params).fetchall()]
    assert seen == sorted(seen, key=lambda v: (v is None, v or "")) and len(seen) == 204  # each tuple once, in order
    assert slice_ranges(con, sql, (0,), total=30, slice_rows=40) == [("", [])]


def test_the_lead_is_the_anchor_or_the_opening_placeholder():
    template = parse_template("Review: {0} -- by {1}")
    assert leading_args(template, ()) == (0,)
    assert leading_args(template, (1,)) == (1,)
    assert streamed_input.ordered_input_sql("SELECT 1", 3, (2,)).endswith("ORDER BY 3, 1, 2")


@pytest.mark.parametrize("text", ["{a} might buy {b}", "{b}{a}{b}", "{a}", "é {a} \\n ✓{b}", "no placeholders"])
def test_a_batch_renders_exactly_as_the_template_does(text):
    import pyarrow as pa

    from aisql.executor.cluster.streamed_input import render_column

    template = parse_template(text)
    rows = [("tea", "a cup"), ("", ""), ("ünï", "x{y}z"), ("a'b", "\t")]
    args = [pa.array([r[i] for r in rows], pa.string()) for i in range(template.arity)]
    if not template.arity:
        args = [pa.array([None] * len(rows), pa.string())][:0]
        assert render_column(template, args).to_pylist() == []
        return
    assert render_column(template, args).to_pylist() == [template.render(r[: template.arity]) for r in rows]


# ---- the product path, on an inline pool -----------------------------------------------------


class InlinePool:
    """WorkerPool's interface, run in this process: two named workers taking shards in turn, each
    shard run by a real EngineWorker method on the tiny engine."""

    def __init__(self, engine) -> None:
        from aisql.executor.cluster.worker import EngineWorker, WorkerInfo

        self.worker = EngineWorker.__new__(EngineWorker)
        self.worker.engine = engine
        self.worker.load_s = 0.0
        self.info = WorkerInfo(engine.info, "here", 0, 0.0)
        self.size = 2
        self.slots = ["w0", "w1"]
        self.on_death = None
        self.shards: list[int] = []
        self.methods: set[str] = set()

    def run_shards(self, task, next_shard, put_back, on_result, *, method="run_shard", extra=()):
        turn = 0
        while True:
            name = f"w{turn % 2}"
            turn += 1
            shard = next_shard(name)
            if shard is None:
                return
            token, items = shard
            self.shards.append(len(items))
            self.methods.add(method)
            on_result(token, getattr(self.worker, method)(task, list(items), *extra), name)

    def call(self, method, *args):
        return getattr(self.worker, method)(*args), "w0"

    def broadcast(self, method):
        getattr(self.worker, method)()

    def close(self):
        pass


@pytest.fixture
def pooled(tiny_engine, monkeypatch):
    """A connection whose model runs on an inline two-worker pool; the driver never encodes."""
    from aisql.api import Connection
    from aisql.executor.cluster.engine import ClusterEngine
    from aisql.executor.cluster.pool import ClusterOptions

    def make(cache=False):
        pool = InlinePool(tiny_engine)
        engine = ClusterEngine(pool, tiny_engine.facts())
        con = Connection(engine=engine, cache=cache)
        con.session.cluster = ClusterOptions(workers=2)
        tiny_engine.reset_cache()
        return con, pool

    return make


JOIN = "SELECT c.id AS cid, p.id AS pid FROM c JOIN p ON AI.IF(PROMPT('{c.profile} might buy {p.description}')) ORDER BY ALL"


def test_a_streamed_join_equals_one_engine_and_naive(pooled, tiny_engine, monkeypatch, make_connection):
    monkeypatch.setattr(streamed_input, "STREAM_AT", 0)
    monkeypatch.setattr(streamed_input, "SLICE_ROWS", 16)  # many slices
    con, pool = pooled()
    _pairs(con.duckdb, 9, 6)
    from aisql.executor.cluster.engine import ClusterEngine

    def no_driver_encoding(*args, **kwargs):
        raise AssertionError("the driver encoded prompts")

    monkeypatch.setattr(ClusterEngine, "encode_prompts", no_driver_encoding)
    spread = con.run(JOIN, checkpoint_every=4)
    node = spread.stats.nodes[0]
    assert node.strategy == "prefetch-sliced" and pool.methods == {"run_texts"} and len(pool.shards) > 2

    single = make_connection()
    _pairs(single.duckdb, 9, 6)
    tiny_engine.reset_cache()
    one = single.run(JOIN)
    naive = single.run(JOIN, naive=True)
    assert spread.table == one.table == naive.table
    totals, reference = spread.stats.totals(), one.stats.totals()
    for name in ("prompts_total", "prompts_unique", "prompts_evaluated", "logical_tokens"):
        assert totals[name] == reference[name], name
    assert node.rows_in == 54 and sum(w["prompts"] for w in spread.stats.workers().values()) == 54


def test_texts_alike_across_slices_are_asked_once(pooled, monkeypatch):
    """Different tuples that render the same text, read in different slices: one prompt."""
    monkeypatch.setattr(streamed_input, "STREAM_AT", 0)
    monkeypatch.setattr(streamed_input, "SLICE_ROWS", 2)
    con, pool = pooled()
    con.duckdb.execute("CREATE TABLE t AS SELECT * FROM (VALUES ('a b', 'c'), ('a', 'b c'), ('x', 'y'), ('a b', 'c')) v(l, r)")
    result = con.run("SELECT l, r, AI.IF(PROMPT('{l} {r}')) AS ok FROM t ORDER BY ALL")
    node = result.stats.nodes[0]
    assert node.prompts_total == 4 and node.prompts_unique == 2 and node.prompts_evaluated == 2
    by_text = {}
    for row in result.table.to_pylist():
        by_text.setdefault(f"{row['l']} {row['r']}", set()).add(row["ok"])
    assert all(len(v) == 1 for v in by_text.values())
    one = con.run("SELECT l, r, AI.IF(PROMPT('{l} {r}')) AS ok FROM t ORDER BY ALL")
    assert one.table == result.table and one.stats.nodes[0].prompts_evaluated == 0


@pytest.mark.parametrize("collided", [False, True])
def test_the_final_query_finds_answers_by_tuple_hash_and_renders_only_after_a_collision(pooled, monkeypatch, collided):
    """The final statement passes DuckDB's hash of each row's arguments and the answers are
    found by it, no row rendered; if two tuples of the node shared a hash, every row is rendered
    and found by its text's digest instead. NULL arguments answer NULL either way."""
    from aisql.executor.store.answer_index import AnswerIndex
    from aisql.executor.node.streamed_answers import StreamedAnswers

    monkeypatch.setattr(streamed_input, "STREAM_AT", 0)
    monkeypatch.setattr(streamed_input, "SLICE_ROWS", 4)
    if collided:
        seal = AnswerIndex.seal_tuples

        def colliding(self):
            seal(self)
            self.tuples_collided = True

        monkeypatch.setattr(AnswerIndex, "seal_tuples", colliding)
    rendered = []
    by_text = StreamedAnswers.lookup
    monkeypatch.setattr(StreamedAnswers, "lookup", lambda self, rows: rendered.extend(rows) or by_text(self, rows))
    con, _ = pooled()
    _pairs(con.duckdb, 5, 4)
    con.duckdb.execute("INSERT INTO c VALUES (99, NULL)")
    result = con.run("SELECT c.id AS cid, p.id AS pid, AI.IF(PROMPT('{c.profile} might buy {p.description}')) AS ok FROM c, p ORDER BY ALL")
    assert result.stats.nodes[0].strategy == "prefetch-sliced"
    assert len(rendered) == (24 if collided else 0)  # every row, by its text (NULL rows answer NULL unrendered)
    naive = con.run("SELECT c.id AS cid, p.id AS pid, AI.IF(PROMPT('{c.profile} might buy {p.description}')) AS ok FROM c, p ORDER BY ALL", naive=True)
    assert result.table == naive.table
    assert [r["ok"] for r in result.table.to_pylist() if r["cid"] == 99] == [None] * 4


def test_tuple_hashes_find_codes_and_a_repeated_hash_is_a_collision():
    from aisql.executor.node.tuple_hashes import with_tuple_hashes
    from sqlglot import parse_one

    import numpy as np

    index = AnswerIndex()
    index.add_tuples([5, 1, 2**64 - 1], [0, 1, 1])
    index.add_tuples([7], [0])
    index.seal_tuples()
    assert index.sealed and not index.tuples_collided
    assert index.codes_by_hash(np.array([1, 7, 3, 2**64 - 1, 2**64 - 2], dtype=np.uint64)).tolist() == [1, 0, -1, 1, -1]
    index.add_tuples([7], [1])
    index.seal_tuples()
    assert index.tuples_collided  # a node's tuples are distinct: the same hash twice is two tuples
    sql = with_tuple_hashes(parse_one("SELECT f(CAST(a AS VARCHAR), CAST(b AS VARCHAR)) FROM t WHERE g(a)", dialect="duckdb"), ["F"])
    assert sql == "SELECT F(CAST(a AS TEXT), CAST(b AS TEXT), HASH(CAST(a AS TEXT), CAST(b AS TEXT))) FROM t WHERE G(a)"


@pytest.mark.slow  # over ~2.5 s: the fast tier stays under 3 min
def test_a_rerun_asks_only_the_rest_and_starts_no_worker_when_all_is_cached(pooled, tmp_path, monkeypatch):
    """The driver stops after 3 shards (a crash, Ctrl-C): what reached it is kept, shard by
    shard; the rerun asks exactly the rest; a third run is all cache and starts no worker."""
    monkeypatch.setattr(streamed_input, "STREAM_AT", 0)
    monkeypatch.setattr(streamed_input, "SLICE_ROWS", 8)
    cache = str(tmp_path / "answers.sqlite")
    con, pool = pooled(cache=cache)
    _pairs(con.duckdb, 6, 5)
    run_shards = pool.run_shards

    def stop_after_three(task, next_shard, put_back, on_result, **kw):
        seen = []

        def counting(token, result, name):
            on_result(token, result, name)
            seen.append(len(result.answers))
            if len(seen) == 3:
                raise KeyboardInterrupt

        run_shards(task, next_shard, put_back, counting, **kw)

    pool.run_shards = stop_after_three
    with pytest.raises(KeyboardInterrupt):
        con.run(JOIN, checkpoint_every=4)
    kept = sum(pool.shards[:3])
    assert 0 < kept < 30 and con.session.store.committed == kept

    again, _ = pooled(cache=cache)
    _pairs(again.duckdb, 6, 5)
    rest = again.run(JOIN, checkpoint_every=4)
    node = rest.stats.nodes[0]
    assert node.prompts_cached == kept and node.prompts_evaluated == 30 - kept  # nothing lost, nothing asked twice

    third, pool3 = pooled(cache=cache)
    _pairs(third.duckdb, 6, 5)
    cached = third.run(JOIN)
    assert cached.table == rest.table and cached.stats.nodes[0].prompts_cached == 30 and pool3.shards == []


def test_max_prompts_holds_on_a_streamed_node(tiny_engine):
    """Shards reserve their prompts before they are handed out: exactly the budget is answered."""
    import threading

    from aisql.executor.answers.answering import Answering, RunOptions
    from aisql.executor.store.answer_store import MemoryAnswerStore
    from aisql.executor.options.budget import Budget, BudgetExceeded
    from aisql.executor.cluster.engine import ClusterEngine
    from aisql.executor.cluster.streaming import StreamedNode
    from aisql.executor.cluster.streamed_input import StreamedGroup

    store = MemoryAnswerStore()
    options = RunOptions.of(budget=Budget(max_prompts=10), checkpoint_every=4)
    answering = Answering(lambda: None, store, threading.RLock(), options=options)
    engine = ClusterEngine(InlinePool(tiny_engine), tiny_engine.facts())
    slices = iter([[StreamedGroup((f"lead {g}",), [f"lead {g} item {i}" for i in range(6)], [1] * 6)] for g in range(5)])
    task = _score_task(tiny_engine)
    with pytest.raises(BudgetExceeded) as stop:
        StreamedNode(answering, task, slices, key="k", node_id="n1", index=AnswerIndex(), on_answers=lambda a: None).run(lambda: engine)
    assert len(store) == stop.value.counts.prompts_evaluated == 10


def _score_task(engine):
    from aisql.api import Connection

    con = Connection(engine=engine, cache=False)
    return con.explain("SELECT AI.IF(PROMPT('{x}')) FROM (SELECT 'a' AS x)").plans[0].nodes[0].call.task


def test_small_nodes_keep_the_sharded_path(pooled):
    con, pool = pooled()
    _pairs(con.duckdb, 3, 3)
    result = con.run(JOIN)
    assert result.stats.nodes[0].strategy == "prefetch" and pool.methods == {"run_shard"}


def test_the_store_process_finds_what_is_stored_commits_what_it_was_sent_and_says_errors(tmp_path):
    from aisql.engine.model.prompt_format import Framing
    from aisql.executor.store.answer_store import Answer, AnswerColumns
    from aisql.executor.store.cache import CacheError, open_answer_store
    from aisql.executor.cluster.store_writer import StoreWriter
    from aisql.functions import Task, by_name

    path = tmp_path / "answers.sqlite"
    task = Task(by_name("IF"), Framing(system=None), ("Yes", "No"))
    warned = []
    store = open_answer_store(str(path), warn=warned.append)
    store.put_many("task", {"stored": Answer(True, 3), "edited": Answer(True, 4)})
    store._db.execute("UPDATE answers SET value = 'not json' WHERE value LIKE '%4%'")  # edited by hand
    writer = StoreWriter(store, "task", task)
    first, found = writer.lookup(["new 0", "stored", "edited", "new 1"])
    assert first == 0 and found == {1: Answer(True, 3)} and store.unreadable_entries == 1 and "could not be read" in warned[0]
    writer.put([2, 0, 3], AnswerColumns.of([Answer(False, 5), Answer(True, 6), Answer(True, 7)]))  # ids: first lookup's positions
    for shard in range(5):
        texts = [f"shard {shard} prompt {i}" for i in range(100)]
        assert writer.lookup(texts) == (4 + 100 * shard, {})
        first = 4 + 100 * shard
        writer.put(range(first, first + 100), AnswerColumns.of([Answer(i % 2 == 0, 10 + i, 0.9, 0.9) for i in range(100)]))
    assert writer.close() == 503
    found = open_answer_store(str(path)).get_many("task", ["shard 3 prompt 7", "shard 4 prompt 8", "edited", "new 0", "never"])
    assert found == {
        "shard 3 prompt 7": Answer(False, 17, 0.9, 0.9),
        "shard 4 prompt 8": Answer(True, 18, 0.9, 0.9),
        "edited": Answer(False, 5),  # the unreadable entry replaced
        "new 0": Answer(True, 6),
    }

    store_dir = open_answer_store(str(tmp_path / "other.sqlite"))
    store_dir.path = tmp_path  # a directory: the process cannot open it, and the driver hears why
    writer = StoreWriter(store_dir, "task", task)
    with pytest.raises(CacheError, match="is a directory"):
        writer.lookup(["x"])
        writer.close()


class _Decided(Exception):
    """Raised once the run has decided whether its node streams (no 50,000 prompts are asked)."""


@pytest.mark.parametrize("distinct, sliced", [(49_999, False), (50_000, True)])
def test_explain_and_the_run_decide_streaming_alike_at_the_threshold(pooled, monkeypatch, distinct, sliced):
    """Was: the run decided by a HyperLogLog sketch (48,052 for 50,000: no streaming), explain by
    the exact count. Near STREAM_AT both count exactly, through one function."""
    from aisql.executor.node.node_runtime import NodeRuntime

    assert streamed_input.STREAM_AT == 50_000  # the README's threshold
    con, _ = pooled()
    con.duckdb.execute(f"CREATE TABLE items AS SELECT i AS id, 'item ' || i AS name FROM range({distinct}) r(i)")
    query = "SELECT id FROM items WHERE AI.IF(PROMPT('{name} is good'))"
    explained = con.explain(query, workers=2).shard_plans["ai_1"]["sliced"]

    decided = []
    original = NodeRuntime.streamed_size

    def deciding(self, duck):
        decided.append(original(self, duck))
        raise _Decided

    monkeypatch.setattr(NodeRuntime, "streamed_size", deciding)
    with pytest.raises(_Decided):
        con.run(query)
    assert explained is sliced
    assert (decided[0] is not None) is sliced
    if sliced:
        assert decided[0] == distinct


@pytest.mark.parametrize("hashed", [True, False])
def test_the_two_admit_paths_agree_on_a_slice_of_new_texts(hashed):
    """StreamedNode.admit takes a vectorised path when every text is new and once in the slice,
    else a text-by-text one: on such a slice both leave the same texts waiting and fresh."""
    from types import SimpleNamespace

    from aisql.executor.store.answer_index import AnswerIndex, digest
    from aisql.executor.answers.answer_types import RunOptions
    from aisql.executor.cluster.streaming import StreamedNode

    groups = [
        streamed_input.StreamedGroup(("a",), ["a x", "a y"], [2, 1], [11, 12] if hashed else None),
        streamed_input.StreamedGroup(("b",), ["b z"], [5], [13] if hashed else None),
    ]
    flat = [digest(t) for g in groups for t in g.texts]
    rows = [r for g in groups for r in g.rows]

    def node():
        answering = SimpleNamespace(store=None, options=RunOptions())
        return StreamedNode(answering, None, iter(()), key="k", node_id="ai_1", index=AnswerIndex(), on_answers=lambda a: None)

    vectorised, one_by_one = node(), node()
    fresh_vectorised = vectorised.admit_all_new(groups, flat, rows, hashed)
    fresh_each = one_by_one.admit_each(groups, flat, rows, one_by_one.index.entries(flat))
    assert fresh_vectorised == fresh_each == dict(zip(flat, ["a x", "a y", "b z"]))
    assert vectorised.waiting_rows == one_by_one.waiting_rows == dict(zip(flat, rows))
    expected_tuples = dict(zip(flat, [[11], [12], [13]])) if hashed else {}
    assert vectorised.waiting_tuples == expected_tuples
    assert {k: v for k, v in one_by_one.waiting_tuples.items() if v} == expected_tuples
