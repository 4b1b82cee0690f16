"""How to phrase an AI.IF for a small model: the README's tips, measured against human labels.

    python benchmarks/phrasing.py [--model smollm2|qwen-0.5b|qwen-1.5b] [--reviews 200]

A seeded sample of SemBench movie reviews (their `scoreSentiment` labels), asked "is it
positive?" in five phrasings through the product path (`aisql.connect(...).run`): question
first, data first with the question after, data first under a "Question:" line, and BigQuery's
SemBench wording. Per phrasing: accuracy, precision, recall, the yes-rate against the labels'
positive rate, and the share of answers near a coin toss (P(Yes) 0.4-0.6, the run summary's
signal line). Results: results/phrasing_<model>.json; RESULTS.md §25.
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, model_argument, write  # noqa: E402

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "sembench_movie" / "Reviews.csv"

PHRASINGS = {
    "question first": "Is this movie review positive? {reviewText}",
    "question first, 'the following'": "Is the following movie review positive? {reviewText}",
    "data first, question after": "{reviewText} Is this movie review positive?",
    "data first, 'Question:' line": "Review: {reviewText}\nQuestion: Is this review positive?",
    "BigQuery's SemBench wording": "Determine if the following movie review is clearly positive, review: {reviewText}",
}


def sample(count: int, seed: int = 7) -> pa.Table:
    with DATA.open(newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["reviewText"].strip()]
    random.Random(seed).shuffle(rows)
    rows = rows[:count]
    return pa.table({
        "row_id": list(range(len(rows))),
        "reviewText": [r["reviewText"] for r in rows],
        "positive": [r["scoreSentiment"] == "POSITIVE" for r in rows],
    })


def measure(model: str, reviews: pa.Table) -> dict:
    import aisql

    con = aisql.connect(model=model, cache=False)
    con.duckdb.register("reviews", reviews)
    out = {}
    for name, template in PHRASINGS.items():
        started = time.perf_counter()
        result = con.run(f"SELECT row_id, positive, AI.IF(PROMPT('{template}')) AS said FROM reviews ORDER BY row_id")
        wall = time.perf_counter() - started
        said = result.table.column("said").to_pylist()
        truth = result.table.column("positive").to_pylist()
        tp = sum(s and t for s, t in zip(said, truth))
        fp = sum(s and not t for s, t in zip(said, truth))
        fn = sum(t and not s for s, t in zip(said, truth))
        (node,) = result.stats.nodes
        out[name] = {
            "template": template,
            "accuracy": round(sum(s == t for s, t in zip(said, truth)) / len(truth), 3),
            "precision": round(tp / (tp + fp), 3) if tp + fp else None,
            "recall": round(tp / (tp + fn), 3) if tp + fn else None,
            "yes_rate": round(sum(said) / len(said), 3),
            "near_coin_toss": round(node.answers_near_boundary / node.answers_scored, 3) if node.answers_scored else None,
            "computed_tokens": node.computed_tokens,
            "wall_s": round(wall, 1),
        }
        print(name, out[name], flush=True)
    con.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--reviews", type=int, default=200)
    args = parser.parse_args()
    reviews = sample(args.reviews)
    record = {
        "model": args.model,
        "reviews": reviews.num_rows,
        "positive_rate": round(sum(reviews.column("positive").to_pylist()) / reviews.num_rows, 3),
        "phrasings": measure(model_argument(args.model), reviews),
        "machine": machine(),
    }
    print(write(f"phrasing_{args.model}", record))


if __name__ == "__main__":
    main()
