"""AI_AGG at growing group sizes: map and reduce prompts, depth, time, and explain's estimate.

    python benchmarks/ai_agg.py [--model tiny] [--copies 1,5,10,20,40]

One group of the example reviews repeated `copies` times (each value made distinct), from well
inside the model's context to ~20x it (tiny's context: 8,192 tokens). For each size: explain's
map/reduce prompt estimate and depth, then a run from an empty cache (prompts evaluated, depth,
wall time), then a rerun (every answer from the result cache). Results: results/ai_agg.json.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

import aisql
from aisql.executor.answers import aggregate

HERE = Path(__file__).resolve().parent
REVIEWS = HERE.parent / "examples" / "data" / "reviews.csv"
SQL = "SELECT AI_AGG(review, 'Summarize the complaints') AS s FROM big"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--copies", default="1,5,10,20,40")
    args = parser.parse_args()
    rows = []
    depths: list[int] = []
    original = aggregate.reduce_groups

    def counting(*a, **k):
        finals, depth = original(*a, **k)
        depths.append(depth)
        return finals, depth

    aggregate.reduce_groups = counting
    for copies in (int(c) for c in args.copies.split(",")):
        con = aisql.connect(model=args.model, cache=False)
        con.sql(f"CREATE TABLE big AS SELECT r.review || ' (' || i || ')' AS review FROM read_csv_auto('{REVIEWS}') r, range({copies}) t(i)")
        node = con.explain(SQL).to_dict()["statements"][0]["ai_nodes"][0]
        found = re.search(r"~([\d,]+) tokens: map ([\d,]+) prompts, reduce ([\d,]+) prompts, depth (\d+)", node["estimate_reason"])
        tokens, maps, reduces, depth = (int(x.replace(",", "")) for x in found.groups())
        started = time.perf_counter()
        result = con.run(SQL)
        wall = time.perf_counter() - started
        started = time.perf_counter()
        again = con.run(SQL)
        rows.append(
            {
                "values": copies * 120,
                "group_tokens_estimated": tokens,
                "estimate": {"map": maps, "reduce": reduces, "prompts": maps + reduces, "depth": depth},
                "measured": {"prompts": result.stats.totals()["prompts_evaluated"], "depth": depths[-1], "wall_s": round(wall, 2),
                             "computed_tokens": result.stats.totals()["computed_tokens"]},
                "rerun": {"prompts_evaluated": again.stats.totals()["prompts_evaluated"], "wall_s": round(time.perf_counter() - started, 3),
                          "same_answer": again.table.to_pylist() == result.table.to_pylist()},
            }
        )
        print(json.dumps(rows[-1]))
        con.close()
    (HERE / "results" / "ai_agg.json").write_text(json.dumps({"model": args.model, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
