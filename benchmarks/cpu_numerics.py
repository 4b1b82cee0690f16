"""Numerics and threads on this CPU, measured: per model, the SemBench reviews under one AI.IF in
float32, bfloat16 and int8 at one thread (tokens per CPU second, answers equal to float32's,
accuracy against the reviews' labels), what `--dtype auto` picked, and the thread policy against
torch's fixed default with the machine idle and with a CPU-burning process beside it.

Every configuration runs in its own process (thread pools and dtypes do not leak between them);
the work is identical in each (same prompts, same computed tokens), so CPU seconds compare.

    python benchmarks/cpu_numerics.py --model smollm2 --reviews 150
    python benchmarks/cpu_numerics.py --model qwen-0.5b --reviews 150   # benchmarks/reference_models.py
    python benchmarks/cpu_numerics.py --model qwen-0.5b --reviews 2000 --dtypes float32,auto --skip-threads --tag _2000
"""

from __future__ import annotations

import argparse
import csv
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

REVIEWS = ROOT.parent / "shared" / "data" / "sembench_movie" / "Reviews.csv"
QUERY = "SELECT id, label, AI.IF(PROMPT('Is this movie review positive? Review: {0}', t)) AS yes FROM reviews ORDER BY id"


def model_spec(name: str) -> str:
    if name.startswith("qwen-"):
        from benchmarks.reference_models import fetch

        return str(fetch(name, log=lambda m: print(m, file=sys.stderr)))
    return name


def child(spec: str, reviews: int, dtype: str, threads: int | None) -> dict:
    """One configuration, in this process: warm up, then the timed query."""
    import pyarrow as pa

    import aisql

    rows = list(csv.DictReader(REVIEWS.open()))[:reviews]
    table = pa.table({
        "id": list(range(len(rows))), "t": [r["reviewText"] for r in rows], "label": [r["scoreSentiment"] == "POSITIVE" for r in rows],
    })
    options = {"quantize": "int8", "dtype": "float32"} if dtype == "int8" else {"dtype": dtype}
    con = aisql.connect(model=spec, cache=False, threads=threads, **options)
    con.register("reviews", table)
    con.run("SELECT AI.IF(PROMPT('Is this movie review positive? Review: {0}', 'warm up')) AS x")
    cpu, wall = time.process_time(), time.perf_counter()
    result = con.run(QUERY)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    answers = result.table.to_pydict()
    totals = result.stats.totals()
    tokens = totals["computed_tokens"]
    return {
        "tie_confirmed_prompts": totals["tie_confirmed_prompts"], "tie_confirmed_tokens": totals["tie_confirmed_tokens"],
        "dtype_asked": dtype, "numerics": result.stats.numerics, "threads": result.stats.threads, "threads_asked": threads,
        "cpu_s": round(cpu, 2), "wall_s": round(wall, 2), "computed_tokens": tokens, "tokens_per_cpu_s": round(tokens / cpu, 1),
        "answers": answers["yes"], "labels": answers["label"],
    }


def run_child(spec: str, reviews: int, dtype: str, threads: int | None) -> dict:
    from benchmarks.common import call_in_subprocess

    return call_in_subprocess("benchmarks.cpu_numerics", f"child({spec!r}, {reviews}, {dtype!r}, {threads!r})")


def burn(seconds: float) -> None:
    end = time.time() + seconds
    while time.time() < end:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--reviews", type=int, default=150)
    parser.add_argument("--skip-threads", action="store_true")
    parser.add_argument("--dtypes", default="float32,bfloat16,int8,auto", help="numerics to run at one thread (float32 first: the reference)")
    parser.add_argument("--tag", default="", help="suffix of the result file's name")
    args = parser.parse_args()
    spec = model_spec(args.model)

    numerics = {}
    for dtype in args.dtypes.split(","):
        numerics[dtype] = run_child(spec, args.reviews, dtype, 1)
        print(dtype, {k: v for k, v in numerics[dtype].items() if k not in ("answers", "labels")}, flush=True)
    reference = numerics["float32"]["answers"]
    labels = numerics["float32"]["labels"]
    for row in numerics.values():
        row["agreement_with_float32"] = round(sum(a == b for a, b in zip(row["answers"], reference)) / len(reference), 4)
        row["accuracy"] = round(sum(a == b for a, b in zip(row["answers"], labels)) / len(labels), 4)
        row["cpu_speedup_vs_float32"] = round(numerics["float32"]["cpu_s"] / row["cpu_s"], 2)

    policy = {}
    if not args.skip_threads:
        for load in (0, 1):
            burners = [multiprocessing.Process(target=burn, args=(3600,)) for _ in range(load)]
            for b in burners:
                b.start()
            try:
                for threads in (2, None):  # torch's default on this 2-core host, and aisql's policy
                    row = run_child(spec, args.reviews, "auto", threads)
                    key = f"{'busy' if load else 'idle'}_{'fixed_2' if threads else 'policy'}"
                    policy[key] = {k: v for k, v in row.items() if k not in ("answers", "labels")}
                    print(key, policy[key], flush=True)
            finally:
                for b in burners:
                    b.terminate()

    out = {
        "model": args.model, "reviews": args.reviews, "cpu": _cpu(), "cores": os.cpu_count(),
        "numerics": {k: {x: y for x, y in v.items() if x not in ("answers", "labels")} for k, v in numerics.items()},
        "threads": policy,
    }
    path = ROOT / "benchmarks" / "results" / f"cpu_numerics_{args.model}{args.tag}.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"written {path}")


def _cpu() -> str:
    from aisql.engine.model.auto_numerics import cpu_kind

    return cpu_kind().describe()


if __name__ == "__main__":
    main()
