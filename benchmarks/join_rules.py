"""Which rule turns join as classification's P(candidate | row) into matches: measured against
human labels on every labelled many-to-many join we have (issue 45).

    python benchmarks/join_rules.py --model smollm2 [--model qwen-0.5b]

Tasks (the join's small side is a label set; a pair's label is known from the data):
- `sembench_genres`: 200 SemBench reviews x the 20 genres of Movies.csv (the review's movie lists
  the genre) — the join of benchmarks/join_rewrite.py;
- `ggr_movie_genres`: GGR movies' synopses (`movieinfo`, 100 rows) x their 12 genres (the row's
  `genres` field lists it).
Each task runs its join once with `{'join': 'classify'}` (the classification pass; the check's
rows are asked of the model too, at targets that let the rewrite answer) and reads every pair's
score from the rewrite. Rules compared: top-p (a row's likeliest candidates until they hold p of
its probability: the shipped rule is p = 0.5), P >= k / M, and top-k. Per rule: pairs returned,
recall, precision and F1 against the labels. Results: results/join_rules_<model>.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import aisql  # noqa: E402
from common import model_argument  # noqa: E402

DATA = HERE.parents[1] / "shared" / "data"
OPTIONS = "{'join': 'classify', 'recall': 0.01, 'precision': 0.01}"


def sembench(con) -> tuple[str, set]:
    movies = DATA / "sembench_movie"
    con.sql(f"CREATE TABLE reviews AS SELECT * FROM read_csv_auto('{movies / 'Reviews.csv'}') WHERE reviewText IS NOT NULL ORDER BY hash(reviewId) LIMIT 200")
    con.sql(f"CREATE TABLE movies AS SELECT * FROM read_csv_auto('{movies / 'Movies.csv'}')")
    con.sql("CREATE TABLE genres AS SELECT DISTINCT trim(unnest(string_split(genre, ','))) AS genre FROM movies")
    labels = con.sql("SELECT DISTINCT r.reviewText, trim(unnest(string_split(m.genre, ','))) FROM reviews r JOIN movies m ON r.id = m.id").fetchall()
    sql = f"SELECT r.reviewId FROM reviews r JOIN genres g ON AI.IF(PROMPT('{{r.reviewText}}\nDoes this review mention or suggest {{g.genre}}?'), {OPTIONS})"
    return sql, {tuple(x) for x in labels}


def ggr_movies(con) -> tuple[str, set]:
    path = DATA / "ggr" / "movies_sampled_labelled.csv"
    con.sql(
        f"CREATE TABLE films AS SELECT DISTINCT split_part(movieinfo, ': ', 2) AS info, split_part(genres, ': ', 2) AS genres "
        f"FROM read_csv_auto('{path}', all_varchar = true)"
    )
    con.sql("CREATE TABLE kinds AS SELECT DISTINCT trim(unnest(string_split(genres, ','))) AS genre FROM films")
    labels = con.sql("SELECT info, trim(unnest(string_split(genres, ','))) FROM films").fetchall()
    sql = f"SELECT f.info FROM films f JOIN kinds k ON AI.IF(PROMPT('Synopsis: {{f.info}}\nIs this a {{k.genre}} movie?'), {OPTIONS})"
    return sql, {tuple(x) for x in labels}


TASKS = {"sembench_genres": sembench, "ggr_movie_genres": ggr_movies}


def rules(row_of: np.ndarray, scores: np.ndarray, candidates: int) -> dict[str, np.ndarray]:
    out = {}
    order = np.lexsort((-scores, row_of))
    for p in (0.3, 0.5, 0.7, 0.9):
        picked = np.zeros(len(scores), dtype=bool)
        for row in np.unique(row_of):
            idx = order[row_of[order] == row]
            held = np.cumsum(scores[idx])
            picked[idx[: int(np.searchsorted(held, p - 1e-12)) + 1]] = True
        out[f"top-p {p}"] = picked
    for k in (1, 2, 3):
        out[f"P >= {k}/M"] = scores >= k / candidates
        rank = np.empty(len(scores), dtype=int)
        for row in np.unique(row_of):
            idx = order[row_of[order] == row]
            rank[idx] = np.arange(len(idx))
        out[f"top-{k}"] = rank < k
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2")
    args = parser.parse_args()
    from aisql.executor.joins import join_rewrite

    out: dict = {"model": args.model, "tasks": {}}
    for name, build in TASKS.items():
        got: dict = {}
        original = join_rewrite.above_uniform_matches

        def spy(pairs, scores, got=got, original=original):
            got.update(pairs=pairs, scores=np.asarray(scores, dtype=float))
            return original(pairs, scores)

        join_rewrite.above_uniform_matches = spy
        try:
            with tempfile.TemporaryDirectory() as scratch:
                con = aisql.connect(model=model_argument(args.model), cache=Path(scratch) / "answers.sqlite")
                sql, labels = build(con)
                con.run(sql)
        finally:
            join_rewrite.above_uniform_matches = original
        pairs, scores = got["pairs"], got["scores"]
        human = np.array([(pairs.rows[r][0], pairs.candidates[c][0]) in labels for r, c in zip(pairs.row_of, pairs.candidate_of)])
        task = {"rows": len(pairs.rows), "candidates": len(pairs.candidates), "pairs": pairs.pairs, "labelled_pairs": int(human.sum()), "rules": {}}
        for rule, picked in rules(pairs.row_of, scores, len(pairs.candidates)).items():
            tp = int((picked & human).sum())
            recall, precision = tp / max(1, human.sum()), tp / max(1, picked.sum())
            f1 = 2 * recall * precision / (recall + precision) if tp else 0.0
            task["rules"][rule] = {"returned": int(picked.sum()), "recall": round(recall, 4), "precision": round(precision, 4), "f1": round(f1, 4)}
        out["tasks"][name] = task
        print(name, json.dumps(task), flush=True)
    path = HERE / "results" / f"join_rules_{args.model}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
