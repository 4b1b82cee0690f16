"""SemBench's movie scenario as BigQuery runs it: Q1-Q10 from `../shared/data/sembench_movie/query/bigquery`,
unchanged but for SemBench's placeholders, read with `--dialect bigquery`, scored against the gold SQL
as SemBench does.

    python benchmarks/sembench_movie.py [--model smollm2] [--reviews-per-movie 20] [--only Q1,Q9]

Scoring: LIMIT queries (Q1, Q2, Q5, Q6) by precision (recall is capped by the LIMIT); Q7 by precision,
recall and F1 of the row set; Q3, Q4 by relative error; Q8 by relative error per sentiment; Q9 by
Spearman rank correlation with the critic's own score (`originalScore`'s numerator, where it is a
number); Q10 by Spearman rank correlation with `audienceScore` (0-100; Movies.csv has 116 rows for
105 ids: averaged per id). Work per query: wall time, prompts evaluated, computed tokens, and the
prompts LIMIT saved (Q1, Q2, Q5, Q6).

Size: the pair queries Q5-Q7 (256 reviews of one movie: 65,280 candidate pairs) and Q10 (all 2,000
reviews) are cut to `--reviews-per-movie` reviews per movie (the first by reviewId), gold computed on
the same cut; the other queries run on all reviews. `--reviews-per-movie 0`: everything at full size
(for the work counts with `--model tiny`). `--naive`: each query run row by row as well, on the
same cut, and checked: every prompt both runs asked got the same answer, and the rows are the same
(as a multiset; for LIMIT queries without ORDER BY any qualifying rows are right, so only their
count; Q1 is not run naive: row by row it asks all 2,000 reviews). `--model qwen-0.5b` / `qwen-1.5b`: the reference GGUFs (benchmarks/reference_models.py).
Results: results/sembench_movie_<model>.json.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

import duckdb
import numpy as np

import aisql
from common import model_argument

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[1] / "shared" / "data" / "sembench_movie"
FILLS = {"<<connection>>": "c", "<<query_id>>": "q", "<<thinking_budget>>": "0", "<<other_params>>": ""}
LIMITED = {"Q1", "Q2", "Q5", "Q6"}
CUT = {"Q5", "Q6", "Q7", "Q10"}  # run on --reviews-per-movie reviews per movie


def query(name: str) -> str:
    text = (DATA / "query" / "bigquery" / f"{name}.sql").read_text()
    for placeholder, value in FILLS.items():
        text = text.replace(placeholder, value)
    return text


def load(con: duckdb.DuckDBPyConnection, per_movie: int) -> None:
    """movie.reviews / movie.movies, and the gold tables Reviews / Movies, cut alike."""
    con.execute("CREATE SCHEMA IF NOT EXISTS movie")
    cut = f"WHERE rn <= {per_movie}" if per_movie else ""
    con.execute(
        f"""CREATE OR REPLACE TABLE movie.reviews AS SELECT * EXCLUDE (rn) FROM (
            SELECT *, row_number() OVER (PARTITION BY id ORDER BY reviewId) AS rn
            FROM read_csv_auto('{DATA / 'Reviews.csv'}')) {cut}"""
    )
    con.execute(f"CREATE OR REPLACE TABLE movie.movies AS SELECT * FROM read_csv_auto('{DATA / 'Movies.csv'}')")
    con.execute("CREATE OR REPLACE VIEW Reviews AS SELECT * FROM movie.reviews")
    con.execute("CREATE OR REPLACE VIEW Movies AS SELECT * FROM movie.movies")


def spearman(a: list[float], b: list[float]) -> float | None:
    """Spearman's rank correlation (average ranks for ties)."""
    if len(a) < 3:
        return None

    def ranks(values):
        values = np.asarray(values, dtype=float)
        order = values.argsort(kind="stable")
        out = np.empty(len(values))
        out[order] = np.arange(len(values), dtype=float)
        for v in np.unique(values):
            same = values == v
            out[same] = out[same].mean()
        return out

    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return None
    return round(float(np.corrcoef(ra, rb)[0, 1]), 3)


def gold_rows(con: duckdb.DuckDBPyConnection, name: str) -> list[tuple]:
    sql = (DATA / "query" / "gold_sql" / f"{name}.sql").read_text()
    sql = sql.replace("CAST(SPLIT_PART", "TRY_CAST(SPLIT_PART")  # scores like 'B+' have no numerator
    return con.sql(sql).fetchall()


def score(name: str, got: list[tuple], gold: list[tuple]) -> dict:
    if name in ("Q1", "Q2"):
        wanted = {row[0] for row in gold}
        return {"precision": round(sum(r[0] in wanted for r in got) / len(got), 3) if got else None, "returned": [r[0] for r in got]}
    if name in ("Q5", "Q6", "Q7"):
        # Row sets: the reviews table repeats some reviews, so pairs repeat too.
        wanted, returned = {tuple(row) for row in gold}, {tuple(row) for row in got}
        hits = len(returned & wanted)
        precision = hits / len(returned) if returned else None
        if name != "Q7":
            return {"precision": round(precision, 3) if precision is not None else None}
        recall = hits / len(wanted) if wanted else None
        f1 = 2 * precision * recall / (precision + recall) if precision and recall else 0.0
        return {"precision": round(precision or 0, 3), "recall": round(recall or 0, 3), "f1": round(f1, 3), "gold_rows": len(wanted), "distinct_rows": len(returned)}
    if name in ("Q3", "Q4"):
        value, truth = got[0][0], gold[0][0]
        return {"value": value, "gold": truth, "relative_error": round(abs(value - truth) / abs(truth), 3) if truth else None}
    if name == "Q8":
        have, want = dict(got), dict(gold)
        return {"value": have, "gold": want, "relative_error": {k: round(abs(have.get(k, 0) - v) / v, 3) for k, v in want.items()}}
    truth = {}
    for key, value in gold:
        if value is not None:
            truth.setdefault(key, []).append(float(value))
    pairs = [(float(v), sum(truth[k]) / len(truth[k])) for k, v in got if k in truth and v is not None]
    return {"spearman": spearman([p[0] for p in pairs], [p[1] for p in pairs]), "rows_with_gold": len(pairs)}


class AnswerRecorder:
    """The engine, remembering the answer (best label) it gave each distinct prompt."""

    def __init__(self, engine) -> None:
        self._engine = engine
        self.answers: dict[tuple, int] = {}

    def score(self, requests, **kwargs):
        out = self._engine.score(requests, **kwargs)
        for request, result in zip(requests, out):
            key = (tuple(request.prompt_ids), tuple(map(tuple, request.label_ids)))
            self.answers[key] = max(range(len(result.logprobs)), key=result.logprobs.__getitem__)
        return out

    def __getattr__(self, name):
        return getattr(self._engine, name)


FLOAT_NOISE = 1e-4  # AI.SCORE is an expectation: batched and one-prompt passes agree to float noise (docs/architecture.md)


def float_difference(a: list[tuple], b: list[tuple]) -> float | None:
    """The largest difference between the floats of two row multisets that are equal but for
    float noise (AI.SCORE's expectations); None when they differ otherwise."""
    key = lambda row: tuple(round(v, 3) if isinstance(v, float) else (v is None, str(v)) for v in row)  # noqa: E731
    a, b = sorted(a, key=key), sorted(b, key=key)
    if len(a) != len(b):
        return None
    worst = 0.0
    for x, y in zip(a, b):
        for u, v in zip(x, y):
            if isinstance(u, float) and isinstance(v, float):
                worst = max(worst, abs(u - v))
            elif u != v:
                return None
    return worst


def naive_check(con: aisql.Connection, recorder: AnswerRecorder, sql: str, planned_rows: list[tuple], limited: bool) -> dict:
    """The query row by row, on the same data: same answer to every prompt both runs asked, same rows."""
    planned_answers, recorder.answers = recorder.answers, {}
    con.session.engine.reset_cache()
    began = time.perf_counter()
    result = con.run(sql, naive=True)
    wall = time.perf_counter() - began
    naive_answers, recorder.answers = recorder.answers, {}
    got = [tuple(row) for row in zip(*[c.to_pylist() for c in result.table.columns])] if result.table is not None else []
    shared = planned_answers.keys() & naive_answers.keys()
    same_answers = all(planned_answers[k] == naive_answers[k] for k in shared)
    difference = None if limited else float_difference(got, planned_rows)
    same_rows = len(got) == len(planned_rows) if limited else difference is not None and difference <= FLOAT_NOISE
    totals = result.stats.totals()
    return {
        "naive": {"wall_s": round(wall, 2), "prompts_evaluated": totals["prompts_evaluated"], "computed_tokens": totals["computed_tokens"]},
        "prompts_compared": len(shared),
        "same_best_labels": same_answers,  # every prompt both runs asked: the same best label
        **({"max_float_difference": float(f"{difference:.2g}")} if difference else {}),
        "planned_equals_naive": same_answers and same_rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--reviews-per-movie", type=int, default=20, help="cut for Q5-Q7 and Q10 (0: full size)")
    parser.add_argument("--only", help="comma-separated, e.g. Q1,Q9")
    parser.add_argument("--naive", action="store_true", help="also run row by row and check planned == naive")
    args = parser.parse_args()
    names = [f"Q{i}" for i in range(1, 11) if not args.only or f"Q{i}" in args.only.split(",")]
    started = time.perf_counter()
    loading = aisql.connect(model=model_argument(args.model), cache=False)
    load_started = time.perf_counter()
    recorder = AnswerRecorder(loading.session.engine)  # load once, timed apart from the queries
    con = aisql.Connection(engine=recorder, cache=False, dialect="bigquery")
    out = {"model": args.model, "model_load_s": round(time.perf_counter() - load_started, 2), "reviews_per_movie_for": sorted(CUT), "queries": []}
    out["reviews_per_movie"] = args.reviews_per_movie or "all"
    for name in names:
        load(con.duckdb, args.reviews_per_movie if name in CUT else 0)
        con.session.engine.reset_cache()
        recorder.answers = {}
        sql = query(name)
        began = time.perf_counter()
        result = con.run(sql)
        wall = time.perf_counter() - began
        totals = result.stats.totals()
        # Duplicate column names (r1.reviewId, r2.reviewId) collapse in a dict: read positionally.
        got = [tuple(row) for row in zip(*[c.to_pylist() for c in result.table.columns])] if result.table is not None else []
        record = {
            "query": name,
            "rows": len(got),
            "wall_s": round(wall, 2),
            "prompts_total": totals["prompts_total"],
            "prompts_evaluated": totals["prompts_evaluated"],
            "prompts_skipped_by_limit": totals["prompts_skipped"],
            "computed_tokens": totals["computed_tokens"],
            "decode_passes": totals["decode_passes"],
            "reviews": con.duckdb.sql("SELECT count(*) FROM movie.reviews").fetchall()[0][0],
        }
        record.update(score(name, got, gold_rows(con.duckdb, name)))
        if args.naive and name == "Q1":
            record["naive"] = "skipped: row by row it asks all 2,000 reviews (LIMIT cannot stop a naive scan); Q2 checks the same prompt"
        elif args.naive:
            record.update(naive_check(con, recorder, sql, got, limited=name in LIMITED))
        out["queries"].append(record)
        print(json.dumps(record), flush=True)
    out["wall_s"] = round(time.perf_counter() - started, 1)
    suffix = f"_{args.only.replace(',', '_')}" if args.only else ""
    path = HERE / "results" / f"sembench_movie_{re.sub(r'[^A-Za-z0-9_.-]', '_', args.model)}{suffix}.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(out, indent=2, default=str) + "\n")
    print(f"-> {path}")


if __name__ == "__main__":
    main()
