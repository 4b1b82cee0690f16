"""Is this tree slower than another one? The query benchmark's planned runs and the 300-review
filter, two source trees side by side on the same machine, rounds alternating.

    git worktree add /tmp/base <commit>
    python benchmarks/regression.py --baseline /tmp/base [--rounds 3] [--only Q1,Q4,filter]

Our CPUs change from day to day (the same "AMD EPYC" name has measured 34 and 100 GFLOP/s per core
in float32 on different days), so a figure from another day says nothing about a change: both
trees run here, now, each measurement in a fresh interpreter whose `aisql` is that tree's
(PYTHONPATH), in the order baseline, this tree, baseline, ... The workloads are this tree's
definitions for both (benchmarks/run.py's Q1-Q4 on tiny-32k, planned, cold prefix cache, no result
cache; vs_llamacpp.py's filter: SmolLM2, 300 SemBench reviews, `AI.IF`, default numerics), at the
engine's default threads. Per workload: every round's wall and CPU seconds, computed tokens, the
medians, this tree's median over the baseline's, and whether the answers are the same rows.
Results: results/regression.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from common import machine, write  # noqa: E402

QUERY_NAMES = ("Q1", "Q2", "Q3", "Q4")
FILTER_REVIEWS = 300


def positive_rounds(text: str) -> int:
    """argparse type: a whole number of rounds, at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: at least 1 round")
    return value


def child(workload: str) -> dict:
    """One measurement, in this interpreter (whose `aisql` is the tree under test)."""
    import aisql

    if workload == "filter":  # vs_llamacpp.py's own aisql measurement, at default numerics and threads
        from vs_llamacpp import aisql_child, gguf_of

        measured = aisql_child(str(gguf_of("smollm2")), FILTER_REVIEWS, "auto", None)
        return {
            "aisql": str(Path(aisql.__file__).resolve().parent.parent),
            **{key: measured[key] for key in ("wall_s", "cpu_s", "computed_tokens", "numerics", "threads")},
            "rows": sum(measured["answers"]),
            "rows_digest": hashlib.sha256(repr(measured["answers"]).encode()).hexdigest()[:16],
        }
    from common import bench_engine
    from datagen import tables
    from run import QUERIES, connection

    (name,) = [q for q in QUERIES if q.startswith(workload + "_")]
    con = connection(bench_engine(), tables(1))
    sql = QUERIES[name]
    cpu, wall = time.process_time(), time.perf_counter()
    result = con.run(sql)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    rows = sorted(map(repr, result.table.to_pylist()))
    return {
        "aisql": str(Path(aisql.__file__).resolve().parent.parent),
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "computed_tokens": result.stats.totals()["computed_tokens"],
        "numerics": result.stats.numerics,
        "threads": result.stats.threads,
        "rows": len(rows),
        "rows_digest": hashlib.sha256("\n".join(rows).encode()).hexdigest()[:16],
    }


def measure(tree: Path, workload: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", workload], capture_output=True, text=True, env=env, cwd=str(tree), check=False
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"{workload} on {tree} failed:\n{done.stderr[-3000:]}")
    record = json.loads(line[len("RESULT ") :])
    if Path(record["aisql"]) != tree.resolve():
        raise SystemExit(f"{workload}: imported aisql from {record['aisql']}, not {tree}")
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", help="the other source tree (a git worktree of the commit to compare with)")
    parser.add_argument("--rounds", type=positive_rounds, default=3)
    parser.add_argument("--only", help="comma-separated workloads: Q1,Q2,Q3,Q4,filter (default: all)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args.child)), flush=True)
        return
    if not args.baseline:
        parser.error("--baseline is required")
    baseline = Path(args.baseline).resolve()
    if not (baseline / "aisql" / "__init__.py").is_file():
        parser.error(f"--baseline {args.baseline}: not a source tree of aisql (no aisql/__init__.py there)")
    trees = {"baseline": baseline, "this tree": ROOT}
    workloads = args.only.split(",") if args.only else [*QUERY_NAMES, "filter"]
    unknown = [w for w in workloads if w not in (*QUERY_NAMES, "filter")]
    if unknown:
        parser.error(f"--only: unknown workload {unknown[0]!r} (expected some of {', '.join((*QUERY_NAMES, 'filter'))})")
    record = {"machine": machine(), "trees": {k: str(v) for k, v in trees.items()}, "rounds": args.rounds, "workloads": {}}
    for workload in workloads:
        runs: dict[str, list[dict]] = {name: [] for name in trees}
        for _ in range(args.rounds):
            for name, tree in trees.items():
                runs[name].append(measure(tree, workload))
        medians = {name: {key: statistics.median(r[key] for r in rs) for key in ("wall_s", "cpu_s")} for name, rs in runs.items()}
        entry = {
            "runs": runs,
            "median": medians,
            "wall_ratio": round(medians["this tree"]["wall_s"] / medians["baseline"]["wall_s"], 3),
            "cpu_ratio": round(medians["this tree"]["cpu_s"] / medians["baseline"]["cpu_s"], 3),
            "same_rows": len({r["rows_digest"] for rs in runs.values() for r in rs}) == 1,
        }
        record["workloads"][workload] = entry
        print(
            f"{workload}: baseline {medians['baseline']['wall_s']:.2f} s wall / {medians['baseline']['cpu_s']:.2f} CPU s, "
            f"this tree {medians['this tree']['wall_s']:.2f} / {medians['this tree']['cpu_s']:.2f}: "
            f"wall x{entry['wall_ratio']}, CPU x{entry['cpu_ratio']}, same rows {entry['same_rows']}",
            flush=True,
        )
        write("regression", record)


if __name__ == "__main__":
    main()
