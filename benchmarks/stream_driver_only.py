"""The streamed driver's own CPU per prompt, without Ray and without a model's time.

    python benchmarks/stream_driver_only.py [--pairs 200000,1000000] [--repeat 2]

benchmarks/stream_scale.py measures the real thing (2 Ray workers running the tiny model), where
the driver's CPU also holds Ray's per-call work and whatever a busy 2-core machine adds to it.
This one isolates what the driver itself does per prompt — read slices from DuckDB, render and
digest, deduplicate, queue, record answers, hand them to the store process, and the final
query's lookups — by running the same `answer_streamed` loop (the real NodeRuntime, DuckDB
input, store process and final query) against a pool whose "workers" answer every shard at once
with a fixed answer. Not a product path: a measuring harness, like a profiler's.

Writes benchmarks/results/stream_driver_only.json: per size, the driver process's CPU seconds
per million prompts (all its threads: DuckDB's included) and its main thread's.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SQL = "SELECT c.id AS customer, p.id AS product FROM customers c JOIN products p ON AI.IF(PROMPT('{c.profile} might buy this: {p.description}'))"


class _Result:
    """What EngineWorker.run_texts returns, with a fixed answer per text."""

    def __init__(self, n: int) -> None:
        from aisql.engine.base import EngineStats
        from aisql.executor.store.answer_store import AnswerColumns

        self.answers = AnswerColumns([i % 2 == 0 for i in range(n)], [23] * n, [0.9] * n, [0.7] * n)
        self.truncated, self.busy_s, self.work = 0, 0.0, EngineStats()


class _InstantPool:
    """WorkerPool's shard loop with two named workers that answer at once."""

    size, slots, on_death = 2, ["w0", "w1"], None

    def __init__(self, info) -> None:
        self.info = info

    def run_shards(self, task, next_shard, put_back, on_result, *, method="run_shard", extra=()):
        turn = 0
        while (shard := next_shard(f"w{turn % 2}")) is not None:
            on_result(shard[0], _Result(len(shard[1])), f"w{turn % 2}")
            turn += 1

    def close(self) -> None:
        pass


def one(pairs: int) -> dict:
    import aisql
    from aisql.executor.cluster import streamed_input
    from aisql.executor.cluster.engine import ClusterEngine
    from aisql.executor.cluster.pool import ClusterOptions
    from aisql.executor.cluster.worker import WorkerInfo

    sys.path.insert(0, str(HERE))
    from datagen import customers, products

    tiny = aisql.connect(model="tiny", cache=False).engine  # its facts and fingerprint; it answers nothing
    engine = ClusterEngine(_InstantPool(WorkerInfo(tiny.info, "here", 0, 0.0)), tiny.facts())
    engine.absorb = lambda work: None
    scratch = tempfile.mkdtemp()
    con = aisql.connect(engine=engine, cache=str(Path(scratch) / "answers.sqlite"))
    con.session.cluster = ClusterOptions(workers=2)
    streamed_input.STREAM_AT = 0
    rng = random.Random(0)
    for name, table in {"customers": customers(rng, max(1, pairs // 1000)), "products": products(rng, 1000)}.items():
        con.duckdb.register(f"__{name}", table)
        con.duckdb.execute(f"CREATE TABLE {name} AS SELECT * FROM __{name}")
    cpu, main, wall = time.process_time(), time.thread_time(), time.perf_counter()
    result = con.run(SQL, checkpoint_every=1000)
    cpu, main, wall = time.process_time() - cpu, time.thread_time() - main, time.perf_counter() - wall
    prompts = result.stats.totals()["prompts_evaluated"]
    return {
        "pairs": pairs,
        "prompts": prompts,
        "rows_out": result.table.num_rows,
        "strategy": result.stats.nodes[0].strategy,
        "wall_s": round(wall, 1),
        "driver_cpu_s_per_million_prompts": round(cpu / prompts * 1e6, 1),
        "main_thread_cpu_s_per_million_prompts": round(main / prompts * 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default="200000,1000000")
    parser.add_argument("--repeat", type=int, default=2, help="runs per size, each in a fresh process (the fastest is kept too)")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        import json

        print("RESULT " + json.dumps(one(args.one)), flush=True)
        return
    import json

    from common import machine, write

    runs = []
    for pairs in [int(p) for p in args.pairs.split(",")]:
        for _ in range(args.repeat):
            proc = subprocess.run([sys.executable, __file__, "--one", str(pairs)], capture_output=True, text=True, cwd=HERE)
            line = next((l for l in proc.stdout.splitlines() if l.startswith("RESULT ")), None)
            if line is None:
                raise SystemExit(proc.stderr[-3000:])
            runs.append(json.loads(line[len("RESULT "):]))
            print(json.dumps(runs[-1]), flush=True)
    write("stream_driver_only", {"benchmark": "stream_driver_only", "workers": "2, answering at once (no model, no Ray)", "machine": machine(), "runs": runs})


if __name__ == "__main__":
    main()
