"""DuckDB functions on a plain connection (`aisql.register`) vs the planned API (`aisql.connect().sql`)
on the hot-leads AI join, same query text, same engine, one process.

    python benchmarks/udf_vs_planned.py [--scale 1] [--repeat 2]

The UDFs see one DuckDB vector (up to 2,048 rows) at a time: they deduplicate and prefix-order
within it, but cannot plan across vectors (pairs are asked in DuckDB's order, rows the plain
filters would drop may be asked if DuckDB evaluates the call first, prompts sharing a customer
may land in different vectors). The planner sees the whole query. Each run starts from a cold
KV cache and no result cache. Written to benchmarks/results/udf_vs_planned.json.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import duckdb
from common import bench_engine, machine, write
from datagen import tables
from run import connection

import aisql

# The spelling both accept: the planner reads ai_if / ai_classify / prompt like AI.IF / AI.CLASSIFY / PROMPT.
QUERIES = {
    "Q1_hot_leads": """
        SELECT c.id AS customer, p.id AS product
        FROM customers c JOIN products p
          ON ai_if(prompt('{0} might buy this: {1}', c.profile, p.description))
        WHERE c.segment = 'retail' AND p.price < 150
        ORDER BY customer, product""",
    "Q2_reviews": """
        SELECT id FROM reviews
        WHERE rating <= 3
          AND ai_if(prompt('Review: {0} Question: does the reviewer complain about the delivery?', text))
          AND ai_if(prompt('Review: {0} Question: is the tone of the review hostile?', text))
        ORDER BY id""",
    "Q2_reviews_csv_file": """
        SELECT id FROM read_csv_auto('{reviews_csv}')
        WHERE rating <= 3
          AND ai_if(prompt('Review: {0} Question: does the reviewer complain about the delivery?', text))
          AND ai_if(prompt('Review: {0} Question: is the tone of the review hostile?', text))
        ORDER BY id""",
    "Q3_classify": """
        SELECT ai_classify(prompt('Which kind of product is this review about? {0}', text),
                           ['kitchen', 'outdoor', 'electronics', 'other']) AS kind,
               count(*) AS reviews
        FROM review_pool GROUP BY 1 ORDER BY 1""",
    "Q4_bio": """
        SELECT r.id AS report, d.term AS condition, m.term AS drug
        FROM reports r
        JOIN terms d ON d.kind = 'condition'
          AND ai_if(prompt('Report: {0} Question: does the report mention {1}?', r.text, d.term))
        JOIN terms m ON m.kind = 'drug'
          AND ai_if(prompt('Report: {0} Question: was the patient given {1}?', r.text, m.term))
        WHERE ai_if(prompt('Report: {0} Question: does the patient have cancer?', r.text))
        ORDER BY 1, 2, 3""",
}


def counted(wall: float, rows, stats) -> dict:
    return {
        "wall_s": round(wall, 3),
        "rows_out": len(rows),
        "prompts_asked": stats["prompts_total"],
        "prompts_evaluated": stats["prompts_evaluated"] + stats.get("prompts_sampled", 0),
        "logical_tokens": stats["logical_tokens"],
        "computed_tokens": stats["computed_tokens"],
        "forward_passes": stats["forward_passes"],
    }


def planned(engine, data, sql: str) -> tuple[dict, list]:
    engine.reset_cache()
    con = connection(engine, data)
    started = time.perf_counter()
    rows = con.sql(sql).fetchall()
    wall = time.perf_counter() - started
    result = counted(wall, rows, con.last_result.stats.totals())
    con.close()
    return result, rows


def udfs(engine, data, sql: str) -> tuple[dict, list]:
    engine.reset_cache()
    con = duckdb.connect()
    for name, table in data.items():
        con.register(f"__{name}", table)
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM __{name}")
    functions = aisql.register(con, engine=engine, cache=False)
    started = time.perf_counter()
    rows = con.execute(sql).fetchall()
    wall = time.perf_counter() - started
    keys = ("prompts_total", "prompts_evaluated", "logical_tokens", "computed_tokens", "forward_passes")
    result = counted(wall, rows, {k: sum(getattr(s, k) for s in functions.stats.values()) for k in keys})
    con.close()
    return result, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=2, help="runs per variant; the fastest is kept")
    parser.add_argument("--only", default="", help="comma-separated query names")
    args = parser.parse_args()
    engine = bench_engine()
    data = tables(args.scale)
    names = [n for n in QUERIES if not args.only or n in args.only.split(",")]
    record = {"scale": args.scale, "model": engine.info.name, "machine": machine(), "queries": {}}
    with tempfile.TemporaryDirectory(prefix="aisql-bench-") as directory:
        reviews_csv = Path(directory) / "reviews.csv"
        duckdb.from_arrow(data["reviews"]).write_csv(str(reviews_csv))
        planned(engine, data, QUERIES[names[0]].replace("{reviews_csv}", str(reviews_csv)))  # warm-up
        for name in names:
            sql = QUERIES[name].replace("{reviews_csv}", str(reviews_csv))
            best = {}
            for variant, fn in (("planned", planned), ("udf", udfs)):
                runs = [fn(engine, data, sql) for _ in range(args.repeat)]
                best[variant] = min(runs, key=lambda r: r[0]["wall_s"])
            (plan, plan_rows), (udf, udf_rows) = best["planned"], best["udf"]
            record["queries"][name] = {
                "query": " ".join(sql.split()),
                "same_rows": plan_rows == udf_rows,
                "planned": plan,
                "udf": udf,
                "ratios": {
                    "udf_over_planned_wall": round(udf["wall_s"] / plan["wall_s"], 2),
                    "udf_over_planned_computed_tokens": round(udf["computed_tokens"] / max(plan["computed_tokens"], 1), 2),
                    "udf_over_planned_prompts_evaluated": round(udf["prompts_evaluated"] / max(plan["prompts_evaluated"], 1), 2),
                },
            }
            print(
                f"{name}: planned {plan['wall_s']} s, udf {udf['wall_s']} s · {record['queries'][name]['ratios']} · same rows {plan_rows == udf_rows}"
            )
    print(f"-> {write('udf_vs_planned', record)}")


if __name__ == "__main__":
    main()
