"""The labelled tasks of the decision-quality benchmark (benchmarks/decisions.py), and how their
per-row label probabilities are collected through aisql.

    python benchmarks/decision_tasks.py --model qwen-0.5b [--only beer,sembench] [--rows 300]

Each task is one AI call over a labelled table, run as a user runs it (`aisql.connect(...).run`,
planned, radix cache on) with a result cache file per model, so a rerun asks the model nothing.
The rows' raw label log-probabilities are then read back from that cache (every scored answer
keeps them) and written with the labels and the run's work counts to
`results/decision_scores_<model>.json`, which `decisions.py` turns into figures. Content-free
inputs (Zhao et al., ICML 2021: "N/A", "", "[MASK]" in every placeholder) are asked the same way.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

import aisql
from accuracy import ANCHORS, GGR, ggr_table
from common import model_argument

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
RESULTS = Path(__file__).resolve().parent / "results"
CONTENT_FREE = ("N/A", "", "[MASK]")
SEMBENCH_PROMPT = "Determine if the following movie review is clearly positive, review: {reviewText}"
# SemBench Q9's rubric (BigQuery's text, its layout kept in one line per rubric entry)
SEMBENCH_RUBRIC = (
    "Score from 1 to 5 how much did the reviewer like the movie based on provided rubrics.\n\nRubrics:\n"
    "5: Very positive. Strong positive sentiment, indicating high satisfaction.\n"
    "4: Positive. Noticeably positive sentiment, indicating general satisfaction.\n"
    "3: Neutral. Expresses no clear positive or negative sentiment. May be factual or descriptive without emotional language.\n"
    "2: Negative. Noticeably negative sentiment, indicating some level of dissatisfaction but without strong anger or frustration.\n"
    "1: Very negative. Strong negative sentiment, indicating high dissatisfaction, frustration, or anger.\n\nReview:\n{reviewText}"
)


@dataclass
class LabelledTask:
    name: str
    function: str  # IF | CLASSIFY | SCORE
    template: str
    table: pa.Table  # with an `id` column
    labels: list  # per row: bool (IF), a label (CLASSIFY), a number on the scale or None (SCORE)
    classes: list[str] = field(default_factory=list)  # CLASSIFY's labels
    anchors: dict[str, list] = field(default_factory=dict)  # GGR: GPT-4o's and Llama-3's answers on the same rows

    def call(self, options: str = "") -> str:
        prompt = "PROMPT('" + self.template.replace("'", "''") + "')"
        if self.function == "CLASSIFY":
            return f"AI.CLASSIFY({prompt}, [{', '.join(repr(c) for c in self.classes)}]{options})"
        return f"AI.{self.function}({prompt}{options})"

    def sql(self, options: str = "", source: str = "data") -> str:
        return f"SELECT id, {self.call(options)} AS answer FROM {source} ORDER BY id"


def ggr_task(name: str) -> LabelledTask:
    table, labels = ggr_table(name)
    table = table.rename_columns(["id" if c == "row" else c for c in table.column_names])
    spec = GGR[name]
    if "labels" in spec:
        truth = [l["manual_labels"] for l in labels]
        anchors = {a: [l[a] for l in labels] for a in ANCHORS}
        return LabelledTask(name, "CLASSIFY", spec["template"], table, truth, list(spec["labels"]), anchors)
    truth = [l["manual_labels"] == "YES" for l in labels]
    anchors = {a: [l[a] == "YES" for l in labels] for a in ANCHORS}
    return LabelledTask(name, "IF", spec["template"], table, truth, anchors=anchors)


def sembench_reviews() -> list[dict]:
    with open(DATA / "sembench_movie" / "Reviews.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def seeded_rows(rows: list, count: int | None, seed: int = 0) -> list:
    """`count` rows drawn with a fixed seed (all, in order, if None or more than there are)."""
    if count is None or count >= len(rows):
        return rows
    chosen = sorted(random.Random(seed).sample(range(len(rows)), count))
    return [rows[i] for i in chosen]


def sembench_sentiment(rows: int | None) -> LabelledTask:
    reviews = seeded_rows(sembench_reviews(), rows)
    table = pa.table({"id": [r["reviewId"] for r in reviews], "reviewText": [r["reviewText"] for r in reviews]})
    return LabelledTask("sembench", "IF", SEMBENCH_PROMPT, table, [r["scoreSentiment"] == "POSITIVE" for r in reviews])


def critic_score(text: str) -> float | None:
    """A critic's original score as a fraction of its scale ("3/4" -> 0.75, "B+" -> 0.77), None if not readable."""
    text = (text or "").strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)", text)
    if match:
        value, scale = float(match.group(1)), float(match.group(2))
        return value / scale if scale > 0 and 0 <= value <= scale else None
    grades = {"A+": 1.0, "A": 0.95, "A-": 0.9, "B+": 0.87, "B": 0.83, "B-": 0.8, "C+": 0.77, "C": 0.73, "C-": 0.7, "D+": 0.67, "D": 0.63, "D-": 0.6, "F": 0.3}
    return grades.get(text.upper())


def sembench_score() -> LabelledTask:
    """Q9's AI.SCORE over the 256 reviews of ant_man_and_the_wasp_quantumania; labels: the
    critic's own score on the 1-5 scale (1 + 4 x its fraction) where one is given."""
    reviews = [r for r in sembench_reviews() if r["id"] == "ant_man_and_the_wasp_quantumania"]
    table = pa.table({"id": [r["reviewId"] for r in reviews], "reviewText": [r["reviewText"] for r in reviews]})
    labels = [None if critic_score(r["originalScore"]) is None else 1 + 4 * critic_score(r["originalScore"]) for r in reviews]
    return LabelledTask("sembench_score", "SCORE", SEMBENCH_RUBRIC, table, labels)


MOVIE_GENRES = ["Drama", "Comedy", "Action & Adventure"]  # the genres of >= 10 of its 54 distinct films


def movies_genre() -> LabelledTask:
    """AI.CLASSIFY over GGR's movies: the film's genre from its title and synopsis; the label is
    the first genre its Rotten Tomatoes entry lists (the rows whose first genre is one of three:
    46 distinct films)."""
    table, _ = ggr_table("movies")
    table = table.rename_columns(["id" if c == "row" else c for c in table.column_names])
    first = [g.split(",")[0].strip() for g in table.column("genres").to_pylist()]
    keep = [i for i, g in enumerate(first) if g in MOVIE_GENRES]
    template = "What is the genre of this movie? Title: {movietitle}. Synopsis: {movieinfo}"
    return LabelledTask("movies_genre", "CLASSIFY", template, table.take(keep), [first[i] for i in keep], list(MOVIE_GENRES))


RATING_CLASSES = ["negative", "mixed", "positive"]


def rating_class(fraction: float) -> str:
    """A critic's own score as a class: below half of the scale negative, from 80% positive."""
    return "negative" if fraction < 0.5 else ("positive" if fraction >= 0.8 else "mixed")


def sembench_rating(rows: int | None) -> LabelledTask:
    """AI.CLASSIFY over SemBench reviews whose critic gave a readable score: negative / mixed /
    positive from the text, the label from the critic's own score (a seeded sample)."""
    scored = [r for r in sembench_reviews() if critic_score(r["originalScore"]) is not None and r["reviewText"]]
    reviews = seeded_rows(scored, rows)
    table = pa.table({"id": [r["reviewId"] for r in reviews], "reviewText": [r["reviewText"] for r in reviews]})
    labels = [rating_class(critic_score(r["originalScore"])) for r in reviews]
    template = "Is this critic's verdict on the movie negative, mixed or positive? Review: {reviewText}"
    return LabelledTask("sembench_rating", "CLASSIFY", template, table, labels, list(RATING_CLASSES))


REVIEW_GENRES = ["Action", "Sci-fi", "Comedy", "Crime", "Horror"]  # the first genres of >= 53 reviews each


def sembench_genre(per_genre: int = 60, seed: int = 0) -> LabelledTask:
    """AI.CLASSIFY over SemBench reviews: the genre of the film a review is about, from the review
    alone; the label is the film's first genre in Movies.csv (a seeded, balanced sample)."""
    with open(DATA / "sembench_movie" / "Movies.csv", newline="", encoding="utf-8") as f:
        genre_of = {m["id"]: m["genre"].split(",")[0].strip() for m in csv.DictReader(f)}
    reviews = [r for r in sembench_reviews() if r["reviewText"] and genre_of.get(r["id"]) in REVIEW_GENRES]
    chosen = []
    for genre in REVIEW_GENRES:
        chosen += seeded_rows([r for r in reviews if genre_of[r["id"]] == genre], per_genre, seed)
    table = pa.table({"id": [r["reviewId"] for r in chosen], "reviewText": [r["reviewText"] for r in chosen]})
    template = "Which genre is the movie this review is about? Review: {reviewText}"
    return LabelledTask("sembench_genre", "CLASSIFY", template, table, [genre_of[r["id"]] for r in chosen], list(REVIEW_GENRES))


def sembench_film(films: int = 12, per_film: int = 20, seed: int = 0) -> LabelledTask:
    """AI.CLASSIFY with many classes: which of the 12 most-reviewed films a SemBench review is
    about, from the review alone (20 reviews each, a seeded sample); the label is the review's film."""
    with open(DATA / "sembench_movie" / "Movies.csv", newline="", encoding="utf-8") as f:
        title_of = {m["id"]: m["title"] for m in csv.DictReader(f)}
    reviews = [r for r in sembench_reviews() if r["reviewText"]]
    counts: dict[str, int] = {}
    for r in reviews:
        counts[r["id"]] = counts.get(r["id"], 0) + 1
    top = sorted(counts, key=lambda k: (-counts[k], k))[:films]
    chosen = []
    for film in top:
        chosen += seeded_rows([r for r in reviews if r["id"] == film], per_film, seed)
    table = pa.table({"id": [r["reviewId"] for r in chosen], "reviewText": [r["reviewText"] for r in chosen]})
    template = "Which movie is this review about? Review: {reviewText}"
    return LabelledTask("sembench_film", "CLASSIFY", template, table, [title_of[r["id"]] for r in chosen], [title_of[k] for k in top])


def products_rating() -> LabelledTask:
    """AI.SCORE over GGR's products: the stars (1-5) a reviewer gave, from the review's title and
    text (the rating itself left out of the prompt); the label is the rating."""
    table, _ = ggr_table("products")
    table = table.rename_columns(["id" if c == "row" else c for c in table.column_names])
    labels = [float(r) for r in table.column("rating").to_pylist()]
    template = "Rate from 1 to 5 how satisfied this reviewer is with the product. Review title: {review_title}. Review: {text}"
    return LabelledTask("products_rating", "SCORE", template, table, labels)


def tasks(rows: int | None) -> dict[str, callable]:
    """Task builders by name; `rows` cuts SemBench's 2,000 reviews to a seeded sample."""
    out = {"sembench": lambda: sembench_sentiment(rows), "sembench_score": sembench_score}
    out.update({name: (lambda name=name: ggr_task(name)) for name in GGR})
    out.update({"movies_genre": movies_genre, "sembench_rating": lambda: sembench_rating(rows), "products_rating": products_rating})
    out["sembench_genre"] = sembench_genre
    out["sembench_film"] = sembench_film
    return out


def placeholder_columns(template: str) -> list[str]:
    from aisql.sql.template import parse_template

    return [p.column for p in parse_template(template).placeholders]


def function_task(task: LabelledTask):
    """The aisql Task the task's call asks (its result-cache key)."""
    from aisql.functions import by_name
    from aisql.functions.ai_classify import ClassifyOptions
    from aisql.functions.ai_score import ScoreOptions
    from aisql.functions.base import Options

    options = {"IF": Options(), "CLASSIFY": ClassifyOptions(tuple(task.classes)), "SCORE": ScoreOptions((1, 5))}[task.function]
    return by_name(task.function).task(options)


def read_logprobs(con: aisql.Connection, task: LabelledTask, texts: list[str]) -> dict[str, list[float]]:
    """The cached raw label log-probabilities of `texts` under the task's call (nothing asked)."""
    return {text: list(answer.logprobs) for text, answer in read_answers(con, task, texts).items() if answer.logprobs is not None}


def read_answers(con: aisql.Connection, task: LabelledTask, texts: list[str]) -> dict:
    """The cached raw answers of `texts` under the task's call: label log-probabilities and, where
    kept, the hidden state (nothing asked)."""
    return con.store.get_many(function_task(task).store_key(con.fingerprint()), texts)


def seed_examples(task: LabelledTask, per_class: int = 2, seed: int = 12345) -> pa.Table:
    """A few labelled rows, so the run keeps every prompt's hidden state as a user's run with
    examples does (the figures draw their own examples from the collected rows)."""
    rng = random.Random(seed)
    chosen = []
    for value in sorted({str(v) for v in task.labels if v is not None}):
        rows = [i for i, v in enumerate(task.labels) if str(v) == value]
        chosen += rng.sample(rows, min(per_class, len(rows)))
    chosen.sort()
    return task.table.take(chosen).append_column("label", pa.array([task.labels[i] for i in chosen]))


def states_file(model_name: str, task_name: str) -> Path:
    """Where a task's hidden states are kept (float16, a row per task row; not committed)."""
    return RESULTS / ".states" / model_name / f"{task_name}.npy"


def collect(model_name: str, model: str, task: LabelledTask, cache: Path) -> dict:
    import numpy as np

    from aisql.functions.hidden_states import unpack_states
    from aisql.sql.template import parse_template

    con = aisql.connect(model=model, cache=str(cache))
    con.register("data", task.table)
    con.register("seed_examples", seed_examples(task))
    columns = ", ".join(f'"{c}"' for c in placeholder_columns(task.template))
    started = time.perf_counter()
    result = con.run(task.sql(options=f", examples => (SELECT {columns}, label FROM seed_examples)"))
    wall = time.perf_counter() - started
    totals = result.stats.totals()
    template = parse_template(task.template)
    columns = placeholder_columns(task.template)
    rows = task.table.to_pylist()
    texts = [template.render([str(row[c]) for c in columns]) for row in rows]
    answers = read_answers(con, task, texts)
    found = {t: list(a.logprobs) for t, a in answers.items() if a.logprobs is not None}
    with_state = [answers[t].state for t in texts if t in answers and answers[t].state is not None]
    if len(with_state) == len(texts):
        path = states_file(model_name, task.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, unpack_states(with_state).astype(np.float16))
    content_free_texts = [template.render([cf] * len(columns)) for cf in CONTENT_FREE]
    cf_table = pa.table({"id": list(range(len(CONTENT_FREE))), **{c: list(CONTENT_FREE) for c in columns}})
    con.register("content_free", cf_table)
    con.run(task.sql(source="content_free"))
    cf_found = read_logprobs(con, task, content_free_texts)
    missing = sum(t not in found for t in texts)
    record = {
        "task": task.name,
        "function": task.function,
        "template": task.template,
        "classes": task.classes,
        "model": model_name,
        "answered_by": result.model.name if result.model else None,
        "numerics": result.model.numerics if result.model else None,
        "rows": len(rows),
        "missing": missing,
        "work": {k: totals[k] for k in ("prompts_total", "prompts_unique", "prompts_evaluated", "prompts_cached", "logical_tokens", "computed_tokens")},
        "wall_s": round(wall, 2),
        "states": len(with_state),  # rows whose hidden state was kept (states_file)
        "hidden_size": len(with_state[0]) // 2 if with_state else None,
        "ids": [row["id"] for row in rows],
        "labels": task.labels,
        "logprobs": [found.get(t) for t in texts],
        "content_free": [cf_found.get(t) for t in content_free_texts],
        "anchors": task.anchors,
    }
    con.close()
    return record


def verify(model_name: str, model: str, task: LabelledTask, seeds: int, per_class: int = 8) -> list[dict]:
    """The product path against decisions.py's arithmetic: for seeded draws of labelled rows,
    `examples => (SELECT ...)` in SQL gives, on the other rows, exactly the answers the rule
    decisions.py computes from the cached probabilities — and asks the model nothing."""
    from decisions import draw

    from aisql.functions import by_name

    path = RESULTS / f"decision_scores_{model_name}.json"
    record = json.loads(path.read_text())["tasks"][task.name]
    function = by_name(task.function)
    plain = function_task(task)
    checks = []
    for seed in range(seeds):
        chosen = draw(record["labels"], per_class, seed)
        examples = task.table.take(chosen).append_column("label", pa.array([record["labels"][i] for i in chosen]))
        con = aisql.connect(model=model, cache=str(RESULTS / f".decisions-cache-{model_name}.sqlite"))
        con.register("data", task.table)
        con.register("labelled", examples)
        columns = ", ".join(f'"{c}"' for c in placeholder_columns(task.template))
        result = con.run(task.sql(options=f", examples => (SELECT {columns}, label FROM labelled)"))
        answers = dict(zip(result.table.column("id").to_pylist(), result.table.column("answer").to_pylist()))
        rule, _ = function.learn(plain, [record["logprobs"][i] for i in chosen], [record["labels"][i] for i in chosen])
        import dataclasses

        decided = dataclasses.replace(plain, decision=rule)
        expected = {i: function.value_from_scores(decided, lp) for i, lp in zip(record["ids"], record["logprobs"])}
        checks.append(
            {
                "seed": seed,
                "rule": result.stats.nodes[0].decision["rule"],
                "same_answers": all(answers[i] == expected[i] for i in answers),
                "asked_the_model": result.stats.totals()["prompts_evaluated"] + result.stats.nodes[0].decision.get("prompts_evaluated", 0),
            }
        )
        con.close()
    return checks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--only", help="comma-separated task names (sembench, sembench_score, beer, pdmx, ...)")
    parser.add_argument("--rows", type=int, help="SemBench sentiment: a seeded sample of this many reviews (default: all 2,000)")
    parser.add_argument("--cache", help="the result cache file (default: results/.decisions-cache-MODEL.sqlite, kept between runs)")
    parser.add_argument("--verify", type=int, metavar="SEEDS", help="check the SQL path (examples => ...) against decisions.py on this many draws")
    args = parser.parse_args()
    model_name, model = args.model, model_argument(args.model)
    chosen = args.only.split(",") if args.only else list(tasks(args.rows))
    builders = tasks(args.rows)
    if args.verify:
        out = {name: verify(model_name, model, builders[name](), args.verify) for name in chosen}
        (RESULTS / f"decision_verify_{model_name}.json").write_text(json.dumps(out, indent=1) + "\n")
        print(json.dumps(out, indent=1))
        return
    cache = Path(args.cache) if args.cache else RESULTS / f".decisions-cache-{model_name}.sqlite"
    path = RESULTS / f"decision_scores_{model_name}.json"
    out = json.loads(path.read_text()) if path.exists() else {"model": model_name, "tasks": {}}
    for name in chosen:
        record = collect(model_name, model, builders[name](), cache)
        out["tasks"][name] = record
        RESULTS.mkdir(exist_ok=True)
        path.write_text(json.dumps(out) + "\n")
        print(json.dumps({k: record[k] for k in ("task", "model", "rows", "missing", "work", "wall_s", "numerics")}), flush=True)
    print(f"written {path}")


if __name__ == "__main__":
    main()
