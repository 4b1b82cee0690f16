"""Planned vs naive execution of the example queries, in one process on one engine.

    python benchmarks/run.py [--model tiny] [--repeat 1]

Writes benchmarks/results/<query>.json and prints a table. Each query runs naive (one prompt per
row, no dedup, no batching) and planned on the same loaded engine, so the ratios are measured in
one run on one machine: compare ratios, not absolute times (shared machines are noisy). Work is
reported beside wall time: prompts sent, and logical (naive) vs computed tokens. The engine's
prefix cache is emptied before every run, so no run profits from an earlier one.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import aisql
from aisql.engine import load_engine

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
RESULTS = Path(__file__).resolve().parent / "results"
QUERIES = ["hot_leads", "review_sentiment", "pitch"]


def run_query(engine, name: str, naive: bool) -> dict:
    engine.reset_cache()  # every run starts cold: no prefix cached by an earlier run
    con = aisql.Connection(engine=engine)
    con.add_file_search_path([EXAMPLES])
    sql = (EXAMPLES / f"{name}.sql").read_text()
    started = time.perf_counter()
    result = con.run(sql, naive=naive)
    wall = time.perf_counter() - started
    con.close()
    totals = result.stats.totals()
    return {
        "rows_out": result.table.num_rows,
        "wall_s": round(wall, 4),
        "forward_passes": totals["forward_passes"],
        "prompts_total": totals["prompts_total"],
        "prompts_evaluated": totals["prompts_evaluated"],
        "logical_tokens": totals["logical_tokens"],
        "computed_tokens": totals["computed_tokens"],
        "kv_hit_tokens": totals["kv_hit_tokens"],
        "padding_tokens": totals["padding_tokens"],
        "_rows": sorted(map(repr, result.table.to_pylist())),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--repeat", type=int, default=1, help="runs per mode; the fastest is kept")
    args = parser.parse_args()
    engine = load_engine(args.model)
    RESULTS.mkdir(exist_ok=True)
    print(f"{'query':18} {'naive s':>8} {'planned s':>9} {'speedup':>8} {'prompts':>8} {'evaluated':>9} {'logical tok':>11} {'computed tok':>12}")
    for name in QUERIES:
        run_query(engine, name, naive=False)  # warm-up (first forward passes allocate)
        naive = min((run_query(engine, name, naive=True) for _ in range(args.repeat)), key=lambda r: r["wall_s"])
        planned = min((run_query(engine, name, naive=False) for _ in range(args.repeat)), key=lambda r: r["wall_s"])
        same = naive.pop("_rows") == planned.pop("_rows")
        record = {
            "query": name,
            "sql": (EXAMPLES / f"{name}.sql").read_text(),
            "model": engine.info.name,
            "device": engine.info.device,
            "machine": platform.platform(),
            "planned_equals_naive": same,
            "naive": naive,
            "planned": planned,
            "ratios": {
                "wall_speedup": round(naive["wall_s"] / planned["wall_s"], 2),
                "computed_token_reduction": round(naive["computed_tokens"] / max(1, planned["computed_tokens"]), 2),
                "forward_pass_reduction": round(naive["forward_passes"] / max(1, planned["forward_passes"]), 2),
            },
        }
        (RESULTS / f"{name}.json").write_text(json.dumps(record, indent=2) + "\n")
        print(
            f"{name:18} {naive['wall_s']:8.2f} {planned['wall_s']:9.2f} {record['ratios']['wall_speedup']:7.1f}x "
            f"{planned['prompts_total']:8} {planned['prompts_evaluated']:9} {planned['logical_tokens']:11} {planned['computed_tokens']:12}"
            + ("" if same else "  RESULTS DIFFER")
        )


if __name__ == "__main__":
    main()
