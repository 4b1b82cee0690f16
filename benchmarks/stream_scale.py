"""Past one driver: an AI join of up to 1M prompts streamed through 2 local Ray workers.

    python benchmarks/stream_scale.py [--pairs 100000,1000000] [--compare 100000] [--check] [--kill 100000]
    python benchmarks/stream_scale.py --small after     # Q1-Q4 at scale 0.25 on 2 workers
    python benchmarks/stream_scale.py --pairs 0 --compare 0 --explain 10000000   # explain's time alone

Customers x 1,000 products (datagen), `AI.IF(PROMPT('{c.profile} might buy this:
{p.description}'))`, on the default `tiny` model (2 layers, hidden 64: a real transformer forward,
small on purpose, so the driver's own work is what is measured). Each configuration runs in a
fresh process (its peak RSS is its own): a local Ray runtime, the workers started and their model
loaded before the query is timed, a fresh result cache file. Per configuration: the driver's CPU
seconds and peak RSS (sampled every 0.2 s during the query, and the kernel's high-water mark),
wall time, prompts, per-worker prompts and busy time.

`--compare N`: N pairs also through the non-streamed path (the driver renders, encodes and
groups every prompt, as before issue 31), for the driver's CPU per prompt before and after.
`--check`: rows equal to one engine on a sample of anchors (5 customers, all their products) and
to naive execution on a small slice (2 customers x 20 products), taken from the largest run.
`--kill N`: an N-pair run whose driver is killed (SIGKILL) once 30% of the answers are stored,
then a rerun on the same result cache: what it finds cached and what it asks again.

Writes benchmarks/results/stream_scale.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PRODUCTS = 1000
SQL = "SELECT c.id AS customer, p.id AS product FROM customers c JOIN products p ON AI.IF(PROMPT('{c.profile} might buy this: {p.description}'))"


def data(pairs: int):
    import random

    from datagen import customers, products

    rng = random.Random(0)
    return {"customers": customers(rng, max(1, pairs // PRODUCTS)), "products": products(rng, PRODUCTS)}


def load(con, tables) -> None:
    for name, table in tables.items():
        con.duckdb.register(f"__{name}", table)
        con.duckdb.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM __{name}")


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def one_run(pairs: int, streamed: bool, rows_out: str | None = None, cache: str | None = None) -> dict:
    """One configuration in this process (run by main in a fresh interpreter). `cache`: this
    result cache file (the kill test), else a fresh one."""
    import resource
    import threading

    import ray

    import aisql
    from aisql.executor.cluster import streamed_input
    from aisql.executor.cluster.pool import ClusterOptions

    # streamed: whatever the size (the default streams nodes of >= STREAM_AT tuples); else the
    # sharded path, whose driver encodes every prompt
    streamed_input.STREAM_AT = 0 if streamed else 1 << 62
    ray.init(num_cpus=2, include_dashboard=False, logging_level="error", log_to_driver=False)
    with tempfile.TemporaryDirectory() as scratch:
        # each worker's prefix KV cache at 256 MB (its default, a quarter of free memory per
        # worker, is for a machine the workers have to themselves)
        con = aisql.connect(
            model="tiny", cache=cache or str(Path(scratch) / "answers.sqlite"), cluster=ClusterOptions(workers=2, threads=1), kv_budget=256 << 20
        )
        load(con, data(pairs))
        started = time.perf_counter()
        con.engine  # start the workers, load the model in each
        start_s = time.perf_counter() - started
        baseline = rss_mb()
        peak, done = [baseline], threading.Event()

        def sample() -> None:
            while not done.wait(0.2):
                peak.append(rss_mb())

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu, started = time.process_time(), time.perf_counter()
        result = con.run(SQL, checkpoint_every=1000)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the node's store process (result-cache lookups and commits; the JSON keeps its first name, writer_process), ended with the node
        writer_cpu = (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
        done.set()
        sampler.join()
        totals = result.stats.totals()
        node = result.stats.nodes[0]
        workers = result.stats.workers()
        busy = [w["busy_s"] for w in workers.values()]
        prompts = totals["prompts_evaluated"]
        if rows_out:
            _write_rows(result.table, rows_out)
        out = {
            "pairs": pairs,
            "path": "streamed" if streamed else "sharded (driver encodes)",
            "strategy": node.strategy,
            "start_s": round(start_s, 1),
            "wall_s": round(wall, 1),
            "driver_cpu_s": round(cpu, 1),
            "driver_cpu_s_per_million_prompts": round(cpu / max(1, prompts) * 1e6, 1),
            "writer_process_cpu_s": round(writer_cpu, 1),
            "writer_process_cpu_s_per_million_prompts": round(writer_cpu / max(1, prompts) * 1e6, 1),
            "driver_rss_mb_before_query": round(baseline),
            "driver_rss_mb_peak_sampled": round(max(peak)),
            "driver_rss_mb_high_water": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "prompts_evaluated": prompts,
            "prompts_cached": totals["prompts_cached"],
            "computed_tokens": totals["computed_tokens"],
            "rows_out": result.table.num_rows,
            "per_worker": workers,
            "balance_busy": round(sum(busy) / (len(busy) * max(busy)), 4) if busy else None,
        }
        con.close()
    ray.shutdown()
    return out


def _write_rows(table, path: str) -> None:
    import pyarrow.parquet as pq

    pq.write_table(table, path)


def check(pairs: int, rows_path: str) -> dict:
    """The largest run's rows against one engine (5 customers, all products) and naive (2 x 20)."""
    import pyarrow.parquet as pq

    import aisql

    got = {(r["customer"], r["product"]) for r in pq.read_table(rows_path).to_pylist()}
    con = aisql.connect(model="tiny", cache=False)
    load(con, data(pairs))
    customers = [r[0] for r in con.duckdb.execute("SELECT id FROM customers ORDER BY hash(id) LIMIT 5").fetchall()]
    ids = ", ".join(map(repr, customers))
    one = con.run(SQL + f" WHERE c.id IN ({ids})")
    one_rows = {(r["customer"], r["product"]) for r in one.table.to_pylist()}
    mine = {pair for pair in got if pair[0] in set(customers)}
    small = ", ".join(map(repr, customers[:2]))
    naive_sql = SQL.replace("FROM customers c JOIN products p", f"FROM (SELECT * FROM customers WHERE id IN ({small})) c JOIN (SELECT * FROM products ORDER BY id LIMIT 20) p")
    naive = con.run(naive_sql, naive=True)
    naive_rows = {(r["customer"], r["product"]) for r in naive.table.to_pylist()}
    product_slice = {r[0] for r in con.duckdb.execute("SELECT id FROM products ORDER BY id LIMIT 20").fetchall()}
    mine_small = {pair for pair in got if pair[0] in set(customers[:2]) and pair[1] in product_slice}
    return {
        "anchors_checked": len(customers),
        "prompts_checked_one_engine": one.stats.totals()["prompts_total"],
        "rows_equal_one_engine": one_rows == mine,
        "prompts_checked_naive": naive.stats.totals()["prompts_total"],
        "rows_equal_naive": naive_rows == mine_small,
    }


def stored(cache: str) -> int:
    import sqlite3

    try:
        with sqlite3.connect(f"file:{cache}?mode=ro", uri=True, timeout=30) as db:
            return db.execute("SELECT count(*) FROM answers").fetchone()[0]
    except sqlite3.Error:
        return 0


def kill_and_rerun(pairs: int, at_share: float = 0.3) -> dict:
    """kill -9 of the driver once `at_share` of the prompts are stored, then a rerun on the same
    result cache: what the rerun finds, what it asks, and the shards that were in flight."""
    import signal

    cache = str(Path(tempfile.mkdtemp()) / "answers.sqlite")
    proc = subprocess.Popen([sys.executable, __file__, "--one", f"{pairs},1,,{cache}"], cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    while proc.poll() is None and stored(cache) < at_share * pairs:
        time.sleep(0.5)
    os.kill(proc.pid, signal.SIGKILL)  # the driver only: its workers lose the shards they were running
    proc.wait()
    time.sleep(5)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # then the local Ray runtime it had started
    except ProcessLookupError:
        pass
    kept = stored(cache)
    rerun = subprocess.run([sys.executable, __file__, "--one", f"{pairs},1,,{cache}"], capture_output=True, text=True, cwd=HERE)
    line = next((l for l in rerun.stdout.splitlines() if l.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"the rerun failed:\n{rerun.stderr[-3000:]}")
    again = json.loads(line[len("RESULT "):])
    return {
        "pairs": pairs,
        "killed_after_stored": kept,
        "rerun_prompts_cached": again["prompts_cached"],
        "rerun_prompts_evaluated": again["prompts_evaluated"],
        "nothing_lost": again["prompts_cached"] == kept,
        "nothing_asked_twice_after_stored": again["prompts_cached"] + again["prompts_evaluated"] == pairs,
        "rerun_stored_total": stored(cache),
        "in_flight_bound": "2 workers x 1 shard (<= 1,000 prompts: --checkpoint-every 1000, groups of 1,000)",
    }


def small_queries(label: str, repeat: int = 3) -> dict:
    """run.py's Q1-Q4 at datagen scale 0.25 on 2 local workers (tiny), each the fastest of
    `repeat` runs from an empty result cache and empty worker caches: what the streaming change
    costs small queries (run this script with PYTHONPATH at an older checkout for 'before')."""
    import ray

    import aisql
    from aisql.executor.store.cache import open_answer_store
    from aisql.executor.cluster.pool import ClusterOptions
    from datagen import tables
    from run import QUERIES

    ray.init(num_cpus=2, include_dashboard=False, logging_level="error", log_to_driver=False)
    con = aisql.connect(model="tiny", cache=False, cluster=ClusterOptions(workers=2, threads=1))
    load(con, tables(scale=0.25))
    con.engine
    out = {"label": label, "aisql": aisql.__file__, "queries": {}}
    for name, sql in sorted(QUERIES.items()):
        best = None
        for _ in range(repeat):
            con.session.store = open_answer_store(False)
            con.engine.reset_cache()
            started = time.perf_counter()
            result = con.run(sql)
            wall = time.perf_counter() - started
            if best is None or wall < best["wall_s"]:
                totals = result.stats.totals()
                best = {"wall_s": round(wall, 3), "prompts_evaluated": totals["prompts_evaluated"], "computed_tokens": totals["computed_tokens"], "rows": result.table.num_rows}
        out["queries"][name] = best
        print(name, json.dumps(best), flush=True)
    con.close()
    ray.shutdown()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default="100000,1000000")
    parser.add_argument("--compare", type=int, default=100_000, help="pairs also run through the non-streamed path (0: none)")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--kill", type=int, default=0, help="pairs of the kill -9 test (0: none)")
    parser.add_argument("--explain", type=int, default=0, help="pairs of the simulated plan timed (scale_out.simulated: explain --workers 64, smollm2's shape; 0: none)")
    parser.add_argument("--small", metavar="LABEL", help="only Q1-Q4 at scale 0.25 on 2 workers, written to results/stream_small_LABEL.json")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # pairs,streamed,rows_path[,cache]: one configuration in this process
    args = parser.parse_args()
    if args.one:
        pairs, streamed, rows, *cache = args.one.split(",")
        print("RESULT " + json.dumps(one_run(int(pairs), streamed == "1", rows or None, cache[0] if cache else None)), flush=True)
        return
    sys.path.insert(0, str(HERE))
    from common import machine, write

    if args.small:
        write(f"stream_small_{args.small}", dict(small_queries(args.small), machine=machine()))
        return

    sizes = [int(p) for p in args.pairs.split(",")]
    configs = [(p, True) for p in sizes if p] + ([(args.compare, False)] if args.compare else [])
    runs = []
    rows_path = str(Path(tempfile.mkdtemp()) / "rows.parquet")
    for pairs, streamed in configs:
        keep = rows_path if streamed and pairs == max(sizes) else ""
        proc = subprocess.run(
            [sys.executable, __file__, "--one", f"{pairs},{int(streamed)},{keep}"], capture_output=True, text=True, cwd=HERE
        )
        line = next((l for l in proc.stdout.splitlines() if l.startswith("RESULT ")), None)
        if line is None:
            raise SystemExit(f"configuration {pairs},{streamed} failed:\n{proc.stderr[-3000:]}")
        runs.append(json.loads(line[len("RESULT "):]))
        print(json.dumps(runs[-1]), flush=True)
    result = {"benchmark": "stream_scale", "model": "tiny (2 layers, hidden 64)", "workers": 2, "machine": machine(), "runs": runs}
    if args.check:
        result["check"] = check(max(sizes), rows_path)
        print(json.dumps(result["check"]), flush=True)
    if args.kill:
        result["kill"] = kill_and_rerun(args.kill)
        print(json.dumps(result["kill"]), flush=True)
    if args.explain:
        from scale_out import simulated

        result["explain"] = simulated(args.explain, 64, "smollm2")
    write("stream_scale" if runs else "stream_scale_explain", result)  # explain alone never overwrites the runs


if __name__ == "__main__":
    main()
