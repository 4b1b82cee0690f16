"""How honest is `explain`? Its estimated AI time and computed tokens against what runs measure,
on benchmarks/run.py's Q1-Q4, on an unseen join of Q1's shape (other data, other plain filters
on both sides) and on SemBench movie queries as BigQuery runs them (full data).

    python benchmarks/estimates.py [--repeat 3] [--sample 16]

The engine's speed is calibrated the way a user's first run calibrates it: one planned run of Q1
(recorded per model by aisql.executor.estimates.throughput); then, per query, `explain` first (no model
run but `--sample` prompts per AI predicate for its selectivity, as `aisql explain --sample 16`),
then `--repeat` planned runs from a cold prefix cache: measured AI time = the AI nodes'
wall time (median), model load reported apart. Targets: time within 2x, tokens within 20%.
Written to results/estimates.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def sembench_tables() -> dict:
    import duckdb

    data = HERE.parents[1] / "shared" / "data" / "sembench_movie"
    con = duckdb.connect()
    return {
        "reviews": con.sql(f"SELECT * FROM read_csv_auto('{data / 'Reviews.csv'}')").to_arrow_table(),
        "movies": con.sql(f"SELECT * FROM read_csv_auto('{data / 'Movies.csv'}')").to_arrow_table(),
    }


def sembench_query(name: str) -> str:
    from sembench_movie import query

    return query(name).replace("movie.reviews", "reviews").replace("movie.movies", "movies")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sembench", default="Q1,Q3,Q9,Q10", help="SemBench movie queries (BigQuery SQL, full data) to check too")
    parser.add_argument("--sample", type=int, default=16, help="explain --sample: prompts per AI predicate to measure its selectivity")
    args = parser.parse_args()
    os.environ.setdefault("AISQL_CACHE_DIR", tempfile.mkdtemp(prefix="aisql-estimates-"))  # its own throughput log
    import time

    from common import bench_engine, machine, write
    from datagen import tables
    from run import QUERIES, connection

    started = time.perf_counter()
    engine = bench_engine()
    load_s = time.perf_counter() - started
    data = tables(1.0)
    unseen = tables(1.0, seed=7)
    cases = dict(QUERIES)
    cases["Q1_shape_unseen"] = """
        SELECT c.id AS customer, p.id AS product
        FROM customers c JOIN products p
          ON AI.IF(PROMPT('{c.profile} might buy this: {p.description}'))
        WHERE c.segment = 'business' AND p.category <> 'kitchen' AND p.price < 120"""

    movie = sembench_tables()

    def run_once(sql: str, tables_) -> tuple[float, int]:
        engine.reset_cache()
        con = connection(engine, tables_)
        con.dialect = "bigquery" if tables_ is movie else None
        result = con.run(sql)
        con.close()
        return sum(n.wall_s for n in result.stats.nodes), result.stats.totals()["computed_tokens"]

    run_once(QUERIES["Q1_hot_leads"], data)  # calibration: the first run of this model
    for name in args.sembench.split(",") if args.sembench else []:
        cases[f"SemBench {name}"] = sembench_query(name)
    out = {"model": "tiny-32k", "machine": machine(), "model_load_s": round(load_s, 2), "queries": []}
    for name, sql in cases.items():
        source = unseen if name.endswith("unseen") else movie if name.startswith("SemBench") else data
        con = connection(engine, source)
        con.dialect = "bigquery" if name.startswith("SemBench") else None
        explanation = con.explain(sql, sample=args.sample)
        con.close()
        estimates = [e for e in explanation.estimates if e is not None]
        est_time = sum(n.plan.time_s for e in estimates for n in e.nodes if n.quality == "estimate")
        est_tokens = sum(n.plan.tokens for e in estimates for n in e.nodes if n.quality == "estimate")
        runs = [run_once(sql, source) for _ in range(args.repeat)]
        measured_time = statistics.median(r[0] for r in runs)
        measured_tokens = runs[0][1]
        record = {
            "query": name,
            "calibrated_tokens_per_s": round(explanation.hardware.planned_tokens_per_s or 0),
            "estimated_ai_s": round(est_time, 3),
            "measured_ai_s_median": round(measured_time, 3),
            "time_ratio": round(est_time / measured_time, 2) if measured_time else None,
            "estimated_tokens": round(est_tokens),
            "measured_tokens": measured_tokens,
            "token_error": round(abs(est_tokens - measured_tokens) / measured_tokens, 3) if measured_tokens else None,
        }
        out["queries"].append(record)
        print(record, flush=True)
    print(f"-> {write('estimates', out)}")


if __name__ == "__main__":
    main()
