"""Answer quality against human labels: the GGR tasks and SemBench movie's AI.IF queries.

    python benchmarks/accuracy.py [--model smollm2|qwen-0.5b|qwen-1.5b|PATH] [--only beer,Q3] [--no-naive]

For each task, a query in aisql SQL is run planned (and naive, to check the answers are
identical), and its answers are scored against the human labels the way the semantic-query
benchmarks score them:
- GGR (`../shared/data/ggr/`, 5 tables x 100 hand-labelled rows): accuracy, precision, recall
  and F1 (YES as the positive class; macro-F1 over three classes for `products`, an
  AI.CLASSIFY), next to the same figures for the GPT-4o and Llama-3-8B/70B answers stored beside
  the labels (the anchors, on the same rows).
- SemBench movie (`../shared/data/sembench_movie/`): Q1-Q4 and Q8 written in aisql SQL with the
  BigQuery prompt text, scored against the gold SQL run on the labels: precision for LIMIT
  queries (Q1, Q2), relative error for counts and ratios (Q3, Q4), and per-group relative error
  for Q8's counts.
Wall time, prompts and computed tokens are recorded; results go to results/accuracy_<model>.json.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

import pyarrow as pa

import aisql
from common import model_argument

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
RESULTS = Path(__file__).resolve().parent / "results"
ANCHORS = ("gpt4o", "llama3-8b", "llama3-70b")

# The GGR questions are the dataset's own (verbatim, their misspelling included); the data fields
# are those the question is about, as a user would write the query.
GGR = {
    "products": dict(
        file="products_sampled_labelled.csv",
        labels=["POSITIVE", "NEGATIVE", "NEUTRAL"],
        template="Given the following fields determine if the review speaks positively ('POSITIVE'), negatively ('NEGATIVE'), "
        "or netural ('NEUTRAL') about the product. Review title: {review_title}. Review: {text}. Rating: {rating}.",
    ),
    "movies": dict(
        file="movies_sampled_labelled.csv",
        template="Would the movie be suitable for kids? Movie: {movietitle}. Genres: {genres}. Synopsis: {movieinfo}",
    ),
    "beer": dict(
        file="beer_sampled_labelled.csv",
        template='Based on the beer descriptions, does this beer have European origin? Beer: {"beer/name"}, style: {"beer/style"}',
    ),
    "pdmx": dict(
        file="pdmx_sampled_labelled.csv",
        template="Does any of this song information reference a specific individual? Title: {title}. Subtitle: {subtitle}. "
        "Song name: {songname}. Artist: {artistname}. Composer: {composername}. Tags: {tags}.",
    ),
    "posts": dict(
        file="posts_sampled_labelled.csv",
        template="Is this post from an online codebase community related to statistics? Comment: {Text} Post: {Body}",
    ),
}


def ggr_sql(name: str) -> str:
    spec = GGR[name]
    prompt = "PROMPT('" + spec["template"].replace("'", "''") + "')"
    if "labels" in spec:
        call = f"AI.CLASSIFY({prompt}, [{', '.join(repr(label) for label in spec['labels'])}])"
    else:
        call = f"AI.IF({prompt})"
    return f"SELECT row, {call} AS answer FROM {name} ORDER BY row"


SEMBENCH_PROMPT = "Determine if the following movie review is clearly positive, review: {reviewText}"
SEMBENCH = {
    "Q1": (f"SELECT reviewId FROM reviews AS r WHERE AI.IF(PROMPT('{SEMBENCH_PROMPT}')) LIMIT 5", "precision"),
    "Q2": (f"SELECT reviewId FROM reviews AS r WHERE r.id = 'taken_3' AND AI.IF(PROMPT('{SEMBENCH_PROMPT}')) LIMIT 5", "precision"),
    "Q3": (f"SELECT COUNT(*) AS positive_review_cnt FROM reviews AS r WHERE r.id = 'taken_3' AND AI.IF(PROMPT('{SEMBENCH_PROMPT}'))", "value"),
    "Q4": (
        f"SELECT CAST(SUM(CASE WHEN AI.IF(PROMPT('{SEMBENCH_PROMPT}')) THEN 1 ELSE 0 END) AS DOUBLE) / COUNT(*) AS positivity_ratio "
        "FROM reviews AS r WHERE r.id = 'taken_3'",
        "value",
    ),
    "Q8": (
        f"SELECT sentiment_label AS scoreSentiment, COUNT(*) AS count FROM (SELECT CASE WHEN AI.IF(PROMPT('{SEMBENCH_PROMPT}')) "
        "THEN 'POSITIVE' ELSE 'NEGATIVE' END AS sentiment_label FROM reviews AS r WHERE r.id = 'taken_3') AS s GROUP BY sentiment_label",
        "groups",
    ),
}


def ggr_table(name: str) -> tuple[pa.Table, list[dict]]:
    """The GGR file as a table (the "column: value" cells unwrapped), and its label columns."""
    with open(DATA / "ggr" / GGR[name]["file"], newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    columns: dict[str, list] = {"row": list(range(len(rows)))}
    for key in rows[0]:
        if key and key not in ("manual_labels", *ANCHORS):
            columns[key] = [_cell(r[key], key) for r in rows]
    labels = [{k: r[k].strip().upper() for k in ("manual_labels", *ANCHORS)} for r in rows]
    return pa.table(columns), labels


def _cell(value: str, key: str) -> str:
    prefix = f"{key}: "
    return value[len(prefix) :] if value.startswith(prefix) else value


def binary_scores(predicted: list[bool], truth: list[bool]) -> dict:
    tp = sum(p and t for p, t in zip(predicted, truth))
    fp = sum(p and not t for p, t in zip(predicted, truth))
    fn = sum(t and not p for p, t in zip(predicted, truth))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    return {
        "accuracy": round(sum(p == t for p, t in zip(predicted, truth)) / len(truth), 3),
        "precision": round(precision, 3),
        "recall": round(recall, 3),
        "f1": round(2 * precision * recall / (precision + recall) if precision + recall else 0.0, 3),
    }


def multiclass_scores(predicted: list[str], truth: list[str], classes: list[str]) -> dict:
    per_class = [binary_scores([p == c for p in predicted], [t == c for t in truth]) for c in classes]
    return {
        "accuracy": round(sum(p == t for p, t in zip(predicted, truth)) / len(truth), 3),
        "macro_precision": round(sum(s["precision"] for s in per_class) / len(classes), 3),
        "macro_recall": round(sum(s["recall"] for s in per_class) / len(classes), 3),
        "macro_f1": round(sum(s["f1"] for s in per_class) / len(classes), 3),
    }


def run(con: aisql.Connection, sql: str, naive: bool) -> tuple[list[dict], dict, float]:
    started = time.perf_counter()
    result = con.run(sql, naive=naive)
    wall = time.perf_counter() - started
    totals = result.stats.totals()
    work = {k: totals[k] for k in ("prompts_total", "prompts_unique", "prompts_evaluated", "logical_tokens", "computed_tokens")}
    return result.table.to_pylist(), work, wall


def ggr_task(name: str, model: str, naive: bool) -> dict:
    table, labels = ggr_table(name)
    spec = GGR[name]
    con = aisql.connect(model=model, cache=False)
    con.register(name, table)
    rows, work, wall = run(con, ggr_sql(name), naive=False)
    answers = [r["answer"] for r in rows]
    record = {"task": name, "rows": len(rows), "planned": {"wall_s": round(wall, 2), **work}}
    if "labels" in spec:
        truth = [l["manual_labels"] for l in labels]
        record["model"] = multiclass_scores(answers, truth, spec["labels"])
        record["anchors"] = {a: multiclass_scores([l[a] for l in labels], truth, spec["labels"]) for a in ANCHORS}
    else:
        truth = [l["manual_labels"] == "YES" for l in labels]
        record["model"] = binary_scores([bool(a) for a in answers], truth)
        record["anchors"] = {a: binary_scores([l[a] == "YES" for l in labels], truth) for a in ANCHORS}
        record["model"]["yes_rate"] = round(sum(bool(a) for a in answers) / len(answers), 3)
    record["label_balance"] = {v: sum(1 for l in labels if l["manual_labels"] == v) for v in sorted({l["manual_labels"] for l in labels})}
    if naive:
        naive_rows, naive_work, naive_wall = run(aisql_connection(model, name, table), ggr_sql(name), naive=True)
        record["naive"] = {"wall_s": round(naive_wall, 2), **naive_work}
        record["planned_equals_naive"] = naive_rows == rows
    con.close()
    return record


def aisql_connection(model: str, name: str, table: pa.Table) -> aisql.Connection:
    con = aisql.connect(model=model, cache=False)
    con.register(name, table)
    return con


def sembench_tables() -> dict[str, pa.Table]:
    import duckdb

    con = duckdb.connect()
    reviews = con.sql(f"SELECT * FROM read_csv_auto('{DATA / 'sembench_movie' / 'Reviews.csv'}')").to_arrow_table()
    return {"reviews": reviews}


def sembench_query(name: str, model: str, naive: bool, cache) -> dict:
    import duckdb

    sql, kind = SEMBENCH[name]
    tables = sembench_tables()
    con = aisql.connect(model=model, cache=cache)
    con.register("reviews", tables["reviews"])
    rows, work, wall = run(con, sql, naive=False)
    gold_sql = (DATA / "sembench_movie" / "query" / "gold_sql" / f"{name}.sql").read_text()
    gold_con = duckdb.connect()
    gold_con.register("Reviews", tables["reviews"])
    gold = gold_con.sql(gold_sql).to_arrow_table().to_pylist()
    record = {"query": name, "sql": sql, "planned": {"wall_s": round(wall, 2), **work}, "result": rows}
    if kind == "precision":
        wanted = {r["reviewId"] for r in gold}
        got = [r["reviewId"] for r in rows]
        record["precision"] = round(sum(g in wanted for g in got) / len(got), 3) if got else None
        record["rows"] = len(got)
    elif kind == "value":
        value = next(iter(rows[0].values()))
        truth = next(iter(gold[0].values()))
        record.update(value=value, gold=truth, relative_error=round(abs(value - truth) / abs(truth), 3) if truth else None)
    else:
        got = {r["scoreSentiment"]: r["count"] for r in rows}
        want = {r["scoreSentiment"]: r["count"] for r in gold}
        record.update(value=got, gold=want, relative_error={k: round(abs(got.get(k, 0) - v) / v, 3) for k, v in want.items()})
    if naive and name != "Q1":  # Q1 scans all 2,000 reviews: row by row it takes too long to check here
        naive_con = aisql.connect(model=model, cache=False)
        naive_con.register("reviews", tables["reviews"])
        naive_rows, naive_work, naive_wall = run(naive_con, sql, naive=True)
        record["naive"] = {"wall_s": round(naive_wall, 2), **naive_work}
        # LIMIT without ORDER BY: any qualifying rows are right; compare the answers themselves.
        record["planned_equals_naive"] = naive_rows == rows if kind != "precision" else set(map(repr, naive_rows)) <= set(map(repr, rows)) or None
        naive_con.close()
    con.close()
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--only", help="comma-separated task names (beer, products, Q1, ...)")
    parser.add_argument("--no-naive", action="store_true", help="skip the naive runs (planned == naive check)")
    args = parser.parse_args()
    model_name, args.model = args.model, model_argument(args.model)  # qwen-0.5b / qwen-1.5b: the reference GGUFs
    chosen = set(args.only.split(",")) if args.only else None
    out = {"model": model_name, "ggr": [], "sembench": []}
    started = time.perf_counter()
    load_started = time.perf_counter()
    aisql.connect(model=args.model, cache=False).session.engine  # noqa: B018 - load (and convert) once, timed
    out["model_load_s"] = round(time.perf_counter() - load_started, 2)
    for name in GGR:
        if chosen and name not in chosen:
            continue
        record = ggr_task(name, args.model, naive=not args.no_naive)
        out["ggr"].append(record)
        print(json.dumps({k: record[k] for k in ("task", "model", "planned")}), flush=True)
    cache = RESULTS / f".accuracy-cache-{model_name}.sqlite"  # SemBench queries share their answers (as one session would)
    for name in SEMBENCH:
        if chosen and name not in chosen:
            continue
        record = sembench_query(name, args.model, naive=not args.no_naive, cache=cache)
        out["sembench"].append(record)
        print(json.dumps({k: v for k, v in record.items() if k not in ("sql", "result")}), flush=True)
    cache.unlink(missing_ok=True)
    out["wall_s"] = round(time.perf_counter() - started, 1)
    RESULTS.mkdir(exist_ok=True)
    suffix = "_" + "_".join(sorted(chosen)) if chosen else ""
    path = RESULTS / f"accuracy_{model_name.replace('/', '_')}{suffix}.json"
    path.write_text(json.dumps(out, indent=2, default=str) + "\n")
    print(f"written {path}")


if __name__ == "__main__":
    main()
