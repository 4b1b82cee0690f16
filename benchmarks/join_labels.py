"""Labelled joins (issue 57): an AI join's strategies judged against labelled pairs, scored on
the pairs that were not labelled.

    python benchmarks/join_labels.py --model qwen-0.5b [--seeds 20] [--labelled-rows 8]

Tasks (the join's small side is a label set; a pair's human label is known from the data):
- `sembench_genres`: 200 SemBench reviews x the 20 genres of Movies.csv (issue 45's join,
  benchmarks/join_rewrite.py): the review's movie lists the genre;
- `ggr_movie_genres`: GGR movies' synopses x their 12 genres (benchmarks/join_rules.py).

Per task, two runs through aisql as a user writes them, each from an empty result cache with the
engine's prefix cache cleared, with the same labelled pairs (`examples => ...`: every pair of
`--labelled-rows` rows, seed 0): the exact plan (every pair asked; its hidden states kept), and
`{'join': 'classify'}` (join as classification where the labelled pairs say it does as well):
their computed tokens, CPU seconds and the strategy the product chose. Then, asking no model
(every pair's answer and state, and every row's classification, are in the two caches), for
`--seeds` seeded draws of labelled rows: F1 against the human labels on the pairs of the other
rows for
- the exact plan with the model's own answers (`exact_argmax`: today's exact join),
- the exact plan under the rule the labelled pairs choose (`exact_labels`: AIFunction.learn —
  the probe on the pairs' hidden states where clearly better),
- join as classification (`classify`: P(candidate | row) > 1 / M),
- the strategy chosen against the labelled pairs (`chosen`: aisql.executor.joins.join_rewrite.judge_by_labels)
with the tokens each costs. Results: results/join_labels_<model>.json (RESULTS.md §34).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from common import model_argument

import aisql

DATA = HERE.parents[1] / "shared" / "data"


def sembench(con) -> dict:
    movies = DATA / "sembench_movie"
    con.sql(
        f"CREATE TABLE reviews AS SELECT * FROM read_csv_auto('{movies / 'Reviews.csv'}') WHERE reviewText IS NOT NULL ORDER BY hash(reviewId) LIMIT 200"
    )
    con.sql(f"CREATE TABLE movies AS SELECT * FROM read_csv_auto('{movies / 'Movies.csv'}')")
    con.sql("CREATE TABLE genres AS SELECT DISTINCT trim(unnest(string_split(genre, ','))) AS genre FROM movies")
    con.sql(
        "CREATE TABLE truth AS SELECT DISTINCT r.reviewText AS row_text, trim(unnest(string_split(m.genre, ','))) AS candidate "
        "FROM reviews r JOIN movies m ON r.id = m.id"
    )
    con.sql(
        "CREATE TABLE all_pairs AS SELECT DISTINCT r.reviewText, g.genre, EXISTS (SELECT 1 FROM truth t WHERE t.row_text = r.reviewText "
        "AND t.candidate = g.genre) AS label FROM reviews r, genres g"
    )
    # `\n` is a backslash and an n in the SQL string, as issue 45 wrote the join (RESULTS.md §30)
    return {"from": "reviews r JOIN genres g", "select": "r.reviewId, g.genre", "template": "{r.reviewText}\\nDoes this review mention or suggest {g.genre}?", "columns": ("reviewText", "genre")}


def ggr_movies(con) -> dict:
    path = DATA / "ggr" / "movies_sampled_labelled.csv"
    con.sql(
        f"CREATE TABLE films AS SELECT DISTINCT split_part(movieinfo, ': ', 2) AS info, split_part(genres, ': ', 2) AS genres "
        f"FROM read_csv_auto('{path}', all_varchar = true)"
    )
    con.sql("CREATE TABLE kinds AS SELECT DISTINCT trim(unnest(string_split(genres, ','))) AS genre FROM films")
    con.sql("CREATE TABLE truth AS SELECT info AS row_text, trim(unnest(string_split(genres, ','))) AS candidate FROM films")
    con.sql(
        "CREATE TABLE all_pairs AS SELECT DISTINCT f.info, k.genre, EXISTS (SELECT 1 FROM truth t WHERE t.row_text = f.info AND t.candidate = k.genre) "
        "AS label FROM films f, kinds k"
    )
    return {"from": "films f JOIN kinds k", "select": "f.info, k.genre", "template": "Synopsis: {f.info}\\nIs this a {k.genre} movie?", "columns": ("info", "genre")}


TASKS = {"sembench_genres": sembench, "ggr_movie_genres": ggr_movies}


def join_sql(spec: dict, options: str) -> str:
    prompt = "PROMPT('" + spec["template"].replace("'", "''") + "'" + ")"
    return f"SELECT {spec['select']} FROM {spec['from'].split(' JOIN ')[0]} JOIN {spec['from'].split(' JOIN ')[1]} ON AI.IF({prompt}{options})"


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def labelled_rows_table(con, columns: tuple[str, str], rows: list[str]) -> None:
    con.duckdb.execute("CREATE OR REPLACE TABLE labelled_pairs AS SELECT * FROM all_pairs WHERE false")
    if rows:
        con.duckdb.executemany("INSERT INTO labelled_pairs SELECT * FROM all_pairs WHERE " + f'"{columns[0]}" = ?', [(r,) for r in rows])


def timed_run(con, sql: str) -> tuple[object, dict]:
    con.engine.reset_cache()
    started, cpu = time.perf_counter(), cpu_seconds()
    result = con.run(sql)
    totals = result.stats.totals()
    return result, {
        "computed_tokens": totals["computed_tokens"],
        "logical_tokens": totals["logical_tokens"],
        "prompts_evaluated": totals["prompts_evaluated"] + sum((n.decision or {}).get("prompts_evaluated", 0) for n in result.stats.nodes),
        "wall_s": round(time.perf_counter() - started, 1),
        "cpu_s": round(cpu_seconds() - cpu, 1),
        "join": result.stats.nodes[0].join,
        "decision": {k: v for k, v in (result.stats.nodes[0].decision or {}).items() if k in ("chosen", "rule", "examples", "held_out")},
    }


def simulate(con_exact, con_classify, spec: dict, rows: list[str], seeds: int, labelled_rows: int) -> dict:
    """Every figure from the two runs' caches: seeded draws of labelled rows, F1 on the others."""
    from aisql.executor.joins import join_rewrite
    from aisql.executor.store.answer_store import Answer
    from aisql.functions import by_name, decision, learning
    from aisql.functions.ai_classify import FUNCTION as CLASSIFY
    from aisql.sql.template import parse_template

    function = by_name("IF")
    task = function.task(function_options())
    plain_key = task.store_key(con_exact.fingerprint())
    pairs = con_exact.duckdb.sql("SELECT * FROM all_pairs").fetchall()
    candidates = sorted({c for _, c, _ in pairs})
    template = parse_template(spec["template"])
    texts = [template.render([r, c]) for r, c, _ in pairs]
    answers: dict[str, Answer] = con_exact.store.get_many(plain_key, texts)
    missing = sum(t not in answers for t in texts)
    if missing:
        raise SystemExit(f"{missing} pairs not in the exact run's cache")
    # the classification pass's P(candidate | row): its task as the rewrite builds it
    options = join_rewrite.classification_options(
        join_rewrite.JoinPairs([], np.zeros(0), np.zeros(0), [], [(c,) for c in candidates], (0,), (1,))
    )
    listing = CLASSIFY.task(options)
    class_texts = {r: template.render([r, join_rewrite.CANDIDATE_MARK]) for r in rows}
    found = con_classify.store.get_many(listing.store_key(con_classify.fingerprint()), list(class_texts.values()))
    p_of = {r: join_rewrite.softmax_rows(np.asarray([found[t].logprobs]))[0] for r, t in class_texts.items() if t in found}
    if len(p_of) < len(rows):
        raise SystemExit(f"{len(rows) - len(p_of)} rows lack the classification pass's answer: the classify run did not run it")
    index = {c: i for i, c in enumerate(candidates)}
    row_pairs: dict[str, list[int]] = {}
    for i, (r, _, _) in enumerate(pairs):
        row_pairs.setdefault(r, []).append(i)
    truth = np.array([bool(label) for _, _, label in pairs])
    own = np.array([bool(function.value_from_scores(task, answers[t].logprobs)) for t in texts])
    classified = np.array([p_of[r][index[c]] > 1.0 / len(candidates) for r, c, _ in pairs])
    figures: dict[str, list[float]] = {name: [] for name in ("exact_argmax", "exact_labels", "classify", "chosen")}
    chosen_names, probe_chosen = [], 0
    for seed in range(seeds):
        rng = np.random.default_rng(2000 + seed)
        labelled = set(rng.choice(len(rows), labelled_rows, replace=False).tolist())
        ex = [i for k, r in enumerate(rows) if k in labelled for i in row_pairs[r]]
        rest = np.array(sorted(set(range(len(pairs))) - set(ex)))
        choice = learning.choose(
            function, task, [answers[texts[i]].logprobs for i in ex], [bool(truth[i]) for i in ex], [answers[texts[i]].state for i in ex]
        )
        probe_chosen += choice.report["chosen"] == learning.PROBE
        ruled = dataclass_replace(task, choice.rule)
        exact_labels = np.array([bool(function.value_from_answer(ruled, answers[texts[i]])) for i in range(len(pairs))])
        judged = join_rewrite.judge_by_labels([bool(classified[i]) for i in ex], [bool(v) for v in choice.held_out], [bool(truth[i]) for i in ex])
        chosen_names.append(judged["strategy"])
        chosen = classified if judged["strategy"] == "classify" else exact_labels
        for name, values in (("exact_argmax", own), ("exact_labels", exact_labels), ("classify", classified), ("chosen", chosen)):
            figures[name].append(decision.f1(values[rest].tolist(), truth[rest].tolist()))
    from probes import summary

    return {
        "pairs": len(pairs),
        "rows": len(rows),
        "candidates": len(candidates),
        "matches": int(truth.sum()),
        "labelled_rows": labelled_rows,
        "f1": {name: summary(values) for name, values in figures.items()},
        "chosen": {name: chosen_names.count(name) for name in ("classify", "exact")},
        "probe_chosen_for_exact": probe_chosen,
    }


_JUDGE = None


def forced_classify() -> None:
    """The next run's labels choose join as classification, whatever they say (its cost measured)."""
    global _JUDGE
    from aisql.executor.joins import join_rewrite

    _JUDGE = _JUDGE or join_rewrite.judge_by_labels

    def classify(*args):
        return {**_JUDGE(*args), "strategy": "classify"}

    join_rewrite.judge_by_labels = classify


def restore_judge() -> None:
    from aisql.executor.joins import join_rewrite

    if _JUDGE is not None:
        join_rewrite.judge_by_labels = _JUDGE


def function_options():
    from aisql.functions.base import Options

    return Options()


def dataclass_replace(task, rule):
    import dataclasses

    return dataclasses.replace(task, decision=rule)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--labelled-rows", type=int, default=8)
    parser.add_argument("--only", help="comma-separated task names")
    args = parser.parse_args()
    model = model_argument(args.model)
    out: dict = {"model": args.model, "labelled_rows": args.labelled_rows, "tasks": {}}
    for name in (args.only.split(",") if args.only else TASKS):
        with tempfile.TemporaryDirectory() as scratch:
            runs, cons = {}, {}
            for strategy, options in (("exact", ""), ("chosen", ", {'join': 'classify'}"), ("classify", ", {'join': 'classify'}")):
                if strategy == "classify":  # the classification's own cost, whichever strategy the labels chose above
                    forced_classify()
                con = aisql.connect(model=model, cache=Path(scratch) / f"{strategy}.sqlite")
                spec = TASKS[name](con)
                rows = [r for (r,) in con.duckdb.sql(f'SELECT DISTINCT "{spec["columns"][0]}" FROM all_pairs ORDER BY 1').fetchall()]
                rng = np.random.default_rng(0)
                labelled_rows_table(con, spec["columns"], [rows[i] for i in sorted(rng.choice(len(rows), args.labelled_rows, replace=False))])
                example_clause = f", examples => (SELECT \"{spec['columns'][0]}\", \"{spec['columns'][1]}\", label FROM labelled_pairs)"
                _, runs[strategy] = timed_run(con, join_sql(spec, options + example_clause))
                cons[strategy] = con
                print(name, strategy, json.dumps(runs[strategy]), flush=True)
            restore_judge()
            task = {"runs": runs, **simulate(cons["exact"], cons["classify"], spec, rows, args.seeds, args.labelled_rows)}
            cost = {"exact": runs["exact"]["computed_tokens"], "classify": runs["classify"]["computed_tokens"]}
            task["computed_tokens"] = {**cost, "chosen_mean": round(sum(cost[k] * n for k, n in task["chosen"].items()) / args.seeds)}
            for con in cons.values():
                con.close()
        out["tasks"][name] = task
        print(name, json.dumps({k: v for k, v in task.items() if k != "runs"}), flush=True)
    path = HERE / "results" / f"join_labels_{args.model}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
