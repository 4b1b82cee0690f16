"""Structured output with the real model: SemBench movie reviews -> a typed STRUCT, SmolLM2.

    python benchmarks/structured_output.py [--reviews 60] [--max-tokens 48] [--model smollm2|qwen-1.5b|...]

`AI.GENERATE(('Movie review: ', reviewText), output_schema => 'sentiment STRING, recommends BOOL,
stars INT64')` over the first --reviews reviews (by reviewId; half POSITIVE, half NEGATIVE by
SemBench's label): how many answers parse (all must), how often `recommends` agrees with the human
label, work (generated tokens, speculation under the constraint), planned vs naive wall time and
equality. A second pass with `max_tokens => 16` shows the closing: documents the budget cuts
still parse. Results: results/structured_output.json (smollm2), results/structured_output_<model>.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import aisql
from common import model_argument

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[1] / "shared" / "data" / "sembench_movie"
SQL = (
    "SELECT reviewId, scoreSentiment, AI.GENERATE(('Movie review: ', reviewText, ' Does the critic recommend the movie?'), "
    "output_schema => 'sentiment STRING, recommends BOOL, stars INT64', max_tokens => {max_tokens}) AS facts "
    "FROM sample ORDER BY reviewId"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reviews", type=int, default=60)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--model", default="smollm2")
    args = parser.parse_args()
    con = aisql.connect(model=model_argument(args.model), cache=False)
    half = args.reviews // 2
    con.sql(
        f"CREATE TABLE sample AS (SELECT * FROM read_csv_auto('{DATA / 'Reviews.csv'}') WHERE scoreSentiment = 'POSITIVE' AND reviewText IS NOT NULL ORDER BY reviewId LIMIT {half}) "
        f"UNION ALL (SELECT * FROM read_csv_auto('{DATA / 'Reviews.csv'}') WHERE scoreSentiment = 'NEGATIVE' AND reviewText IS NOT NULL ORDER BY reviewId LIMIT {half})"
    )
    out: dict = {"model": args.model, "reviews": 2 * half, "max_tokens": args.max_tokens}
    for mode in ("planned", "naive"):
        started = time.perf_counter()
        result = con.run(SQL.format(max_tokens=args.max_tokens), naive=mode == "naive")
        wall = time.perf_counter() - started
        rows = result.table.to_pylist()
        totals = result.stats.totals()
        out[mode] = {
            "wall_s": round(wall, 2),
            "generated_tokens": totals["generated_tokens"],
            "draft_tokens": totals["draft_tokens"],
            "draft_accepted_tokens": totals["draft_accepted_tokens"],
            "parsed": sum(r["facts"] is not None for r in rows),
        }
        out.setdefault("rows", rows)
        if mode == "naive":
            out["planned_equals_naive"] = rows == out["rows"]
    rows = out.pop("rows")
    answered = [r for r in rows if r["facts"] and r["facts"]["recommends"] is not None]
    agree = sum(r["facts"]["recommends"] == (r["scoreSentiment"] == "POSITIVE") for r in answered)
    out["recommends_answered"] = len(answered)
    out["recommends_agrees_with_label"] = round(agree / max(1, len(answered)), 3)
    out["recommends_always_true_baseline"] = round(sum(r["scoreSentiment"] == "POSITIVE" for r in answered) / max(1, len(answered)), 3)
    cut = con.run(SQL.format(max_tokens=16)).table.to_pylist()
    out["max_tokens_16"] = {"parsed": sum(r["facts"] is not None for r in cut), "of": len(cut), "example": cut[0]["facts"]}
    out["example"] = rows[0]["facts"]
    name = "structured_output.json" if args.model == "smollm2" else f"structured_output_{args.model}.json"
    (HERE / "results" / name).write_text(json.dumps(out, indent=2, default=str) + "\n")
    print(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    main()
