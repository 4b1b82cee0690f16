"""Approximate mode (the proxy cascade) against exact AI.IF: LLM calls, wall time, and whether
the recall/precision promise holds — over many seeds, against the LLM's own answers and the
human labels.

    python benchmarks/cascade.py [--model smollm2] [--seeds 100] [--only sembench,beer,...]
    python benchmarks/cascade.py --model qwen-1.5b --proxy smollm2 --rows 600 --samplings progressive,uniform,importance,embeddings

With `--proxy`, the cascade's proxy is that LLM (its one-pass P(yes)): the cold approximate run
pays for the proxy's pass over every row too, and the seeds are run once per `--samplings` entry
(`embeddings`: the embedding-model proxy of before, for comparison). `--rows` takes a seeded
slice of a predicate's rows (the same slice for every run), for oracles too slow for the whole.

SemBench movie: the sentiment predicate over all 2,000 reviews (no LIMIT). GGR: the AI.IF tasks
(100 rows each: the sample is the whole input, so the cascade falls back to exact — shown).
Per predicate: an exact run from an empty cache (wall time, LLM calls), an approximate run from
an empty cache (seed 0: embeddings, sample, proxy, middle), then `--seeds` approximate runs with
other seeds on the exact run's cache (cheap: every LLM answer is cached; the cascade's choices are
exactly what a cold run with that seed would make). A seed fails when its recall or precision
against the LLM's answers is below the target; failures must stay within the binomial 95% upper
bound for delta. Results: results/cascade_<model>.json; the table is RESULTS.md §17.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import aisql  # noqa: E402
from accuracy import GGR, SEMBENCH_PROMPT, ggr_table, sembench_tables  # noqa: E402

TARGETS = {"recall": 0.9, "precision": 0.9, "delta": 0.05}


def predicates() -> dict[str, dict]:
    """name -> table (Arrow), id column, AI.IF prompt (PROMPT template), human label per id."""
    out = {}
    reviews = sembench_tables()["reviews"]
    out["sembench_sentiment"] = {
        "table": reviews,
        "id": "reviewId",
        "template": SEMBENCH_PROMPT,
        "labels": dict(zip(reviews.column("reviewId").to_pylist(), (s == "POSITIVE" for s in reviews.column("scoreSentiment").to_pylist()))),
    }
    # The same predicate asked as a plain question, the phrasing SmolLM2 answers best (§10): an
    # LLM whose answers follow the text's sentiment gives the proxy something to learn.
    out["sembench_sentiment_question"] = dict(out["sembench_sentiment"], template="Is the following movie review positive? {reviewText}")
    # >= 5,000 rows from SemBench: every review asked three ways (the questions a user might
    # write), 6,000 prompts over one join — where a fixed sample is the smallest share.
    out["sembench_sentiment_x3"] = _three_questions(reviews, out["sembench_sentiment"]["labels"])
    for name, spec in GGR.items():
        if "labels" in spec:
            continue  # AI.CLASSIFY tasks: the cascade is for AI.IF
        table, labels = ggr_table(name)
        out[f"ggr_{name}"] = {
            "table": table,
            "id": "row",
            "template": spec["template"],
            "labels": {i: l["manual_labels"] in ("YES", "TRUE", "1") for i, l in enumerate(labels)},
        }
    return out


THREE_QUESTIONS = (
    "Is the following movie review positive?",
    "Does the critic recommend this movie?",
    "Did the reviewer like the film?",
)


def _three_questions(reviews, labels: dict) -> dict:
    import pyarrow as pa

    ids, questions, texts = [], [], []
    for review_id, text in zip(reviews.column("reviewId").to_pylist(), reviews.column("reviewText").to_pylist()):
        for number, question in enumerate(THREE_QUESTIONS):
            ids.append(f"{review_id}#{number}")
            questions.append(question)
            texts.append(text)
    table = pa.table({"pairId": ids, "question": questions, "reviewText": texts})
    return {
        "table": table,
        "id": "pairId",
        "template": "{question} {reviewText}",
        "labels": {i: labels[int(i.split("#")[0]) if isinstance(next(iter(labels)), int) else i.split("#")[0]] for i in ids},
    }


def query(spec: dict, options: str = "") -> str:
    prompt = "PROMPT('" + spec["template"].replace("'", "''") + "')"
    return f"SELECT {spec['id']} AS id, AI.IF({prompt}{options}) AS answer FROM data"


def scores(answers: dict, truth: dict) -> tuple[float, float]:
    """(recall, precision) of `answers` against `truth` (both id -> bool; NULL answers are FALSE)."""
    tp = sum(1 for i, a in answers.items() if a and truth.get(i))
    positives = sum(1 for i in answers if truth.get(i))
    predicted = sum(1 for a in answers.values() if a)
    return (tp / positives if positives else 1.0), (tp / predicted if predicted else 1.0)


def slice_rows(spec: dict, rows: int | None) -> dict:
    """A seeded slice of `rows` rows (ids hashed, so the slice does not depend on file order)."""
    if not rows or rows >= spec["table"].num_rows:
        return spec
    import hashlib

    import pyarrow as pa

    ids = spec["table"].column(spec["id"]).to_pylist()
    chosen = sorted(range(len(ids)), key=lambda i: hashlib.sha256(f"slice\x1f{ids[i]}".encode()).digest())[:rows]
    return dict(spec, table=spec["table"].take(pa.array(sorted(chosen))))


def option_text(targets: dict, **extra) -> str:
    items = {**targets, **extra}
    return ", {" + ", ".join(f"'{k}': {v!r}" if isinstance(v, str) else f"'{k}': {v}" for k, v in items.items()) + "}"


def run_predicate(name: str, spec: dict, model: str, seeds: int, scratch: Path, proxy: str | None = None, samplings=("auto",)) -> dict:
    def connect(cache: Path) -> aisql.Connection:
        con = aisql.connect(model=model, cache=cache)
        con.register("data", spec["table"])
        return con

    exact_con = connect(scratch / f"{name}_exact.sqlite")
    started, cpu = time.perf_counter(), time.process_time()
    exact = exact_con.run(query(spec))
    exact_wall, exact_cpu = time.perf_counter() - started, time.process_time() - cpu
    llm = {r["id"]: bool(r["answer"]) for r in exact.table.to_pylist() if r["answer"] is not None}
    record = {
        "rows": len(llm),
        "exact": {"wall_s": round(exact_wall, 2), "cpu_s": round(exact_cpu, 1), "llm_calls": exact.stats.totals()["prompts_evaluated"], "model": exact.stats.model, "numerics": exact.stats.numerics},
        "llm_vs_labels": dict(zip(("recall", "precision"), (round(x, 4) for x in scores(llm, spec["labels"])))),
    }
    extra = {"proxy": proxy} if proxy else {}
    release(exact_con)  # one large model in memory at a time: a 1.5B oracle in bfloat16 keeps a float32 copy too
    del exact, exact_con
    cold_con = connect(scratch / f"{name}_approximate.sqlite")
    started, cpu = time.perf_counter(), time.process_time()
    cold = cold_con.run(query(spec, option_text(TARGETS, **extra)))
    cold_wall, cold_cpu = time.perf_counter() - started, time.process_time() - cpu
    report = cold.stats.nodes[0].approximate
    cold_answers = {r["id"]: bool(r["answer"]) for r in cold.table.to_pylist() if r["answer"] is not None}
    record["approximate_cold"] = {
        "wall_s": round(cold_wall, 2),
        "wall_vs_exact": round(cold_wall / exact_wall, 3),
        "cpu_s": round(cold_cpu, 1),
        "cpu_vs_exact": round(cold_cpu / max(1e-9, exact_cpu), 3),
        "load_average_1min_at_end": os.getloadavg()[0],
        "llm_calls": cold.stats.totals()["prompts_evaluated"],
        "fallback": report["fallback_to_exact"],
        "proxy_answered": report["proxy_answered"],
        "report": report,
        "vs_llm": dict(zip(("recall", "precision"), (round(x, 4) for x in scores(cold_answers, llm)))),
        "vs_labels": dict(zip(("recall", "precision"), (round(x, 4) for x in scores(cold_answers, spec["labels"])))),
    }
    release(cold_con)
    del cold, cold_con
    exact_con = connect(scratch / f"{name}_exact.sqlite")  # the oracle's answers, all cached: loads no oracle
    record["seeds"] = {}
    for sampling in samplings:
        how = {"proxy": "embeddings"} if sampling == "embeddings" else dict(extra, **({"sampling": sampling} if sampling != "auto" else {}))
        record["seeds"][sampling] = seed_runs(exact_con, spec, llm, seeds, how)
        print(name, sampling, json.dumps({k: v for k, v in record["seeds"][sampling].items() if k != "runs"}), flush=True)
    release(exact_con)
    return record


def release(con: aisql.Connection) -> None:
    """Close a connection and free its models now (the next one may load a model as large)."""
    import gc

    con.close()
    con.session.unload()
    gc.collect()


def seed_runs(con: aisql.Connection, spec: dict, llm: dict, seeds: int, how: dict) -> dict:
    """`seeds` approximate runs on the exact run's cache: what a cold run with each seed decides."""
    from scipy.stats import binom

    runs = []
    for seed in range(seeds):
        result = con.run(query(spec, option_text(TARGETS, **how, seed=seed)))
        report = result.stats.nodes[0].approximate
        answers = {r["id"]: bool(r["answer"]) for r in result.table.to_pylist() if r["answer"] is not None}
        recall, precision = scores(answers, llm)
        human = scores(answers, spec["labels"])
        runs.append(
            {
                "seed": seed,
                "llm_calls": report["llm_answered"],
                "fallback": bool(report["fallback_to_exact"]),
                "stages_used": report.get("stages_used"),
                "recall_vs_llm": recall,
                "precision_vs_llm": precision,
                "recall_vs_labels": human[0],
                "precision_vs_labels": human[1],
            }
        )
    failures = sum(1 for r in runs if r["recall_vs_llm"] < TARGETS["recall"] or r["precision_vs_llm"] < TARGETS["precision"])
    rows = max(1, len(llm))
    return {
        "how": how,
        "count": seeds,
        "fallbacks": sum(r["fallback"] for r in runs),
        "llm_calls_mean": round(sum(r["llm_calls"] for r in runs) / seeds, 1),
        "llm_call_share_mean": round(sum(r["llm_calls"] for r in runs) / seeds / rows, 4),
        "recall_vs_llm_min": round(min(r["recall_vs_llm"] for r in runs), 4),
        "recall_vs_llm_mean": round(sum(r["recall_vs_llm"] for r in runs) / seeds, 4),
        "precision_vs_llm_min": round(min(r["precision_vs_llm"] for r in runs), 4),
        "precision_vs_llm_mean": round(sum(r["precision_vs_llm"] for r in runs) / seeds, 4),
        "recall_vs_labels_mean": round(sum(r["recall_vs_labels"] for r in runs) / seeds, 4),
        "precision_vs_labels_mean": round(sum(r["precision_vs_labels"] for r in runs) / seeds, 4),
        "failures": failures,
        "failures_allowed_95": int(binom.ppf(0.95, seeds, TARGETS["delta"])),
        "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--only", help="comma-separated predicate names (sembench_sentiment, ggr_beer, ...)")
    parser.add_argument("--targets", default="0.9,0.9,0.05", help="recall,precision,delta")
    parser.add_argument("--out", default=None, help="results file name (default cascade_<model>.json)")
    parser.add_argument("--proxy", help="the proxy LLM (e.g. smollm2); default: approximate mode's auto choice")
    parser.add_argument("--samplings", default="auto", help="comma-separated: auto, progressive, uniform, importance, embeddings")
    parser.add_argument("--rows", type=int, help="a seeded slice of this many rows per predicate")
    args = parser.parse_args()
    from common import model_argument

    model_name, args.model = args.model, model_argument(args.model)
    if args.proxy and args.proxy != "embeddings":
        args.proxy = model_argument(args.proxy)  # qwen-0.5b: its verified GGUF
    TARGETS.update(zip(("recall", "precision", "delta"), (float(x) for x in args.targets.split(","))))
    wanted = set(args.only.split(",")) if args.only else None
    out = {"model": model_name, "proxy": args.proxy, "rows": args.rows, "targets": TARGETS, "predicates": {}}
    with tempfile.TemporaryDirectory() as scratch:
        for name, spec in predicates().items():
            if wanted and name not in wanted:
                continue
            spec = slice_rows(spec, args.rows)
            out["predicates"][name] = record = run_predicate(
                name, spec, args.model, args.seeds, Path(scratch), args.proxy, tuple(args.samplings.split(","))
            )
            print(name, json.dumps({k: v for k, v in record.items() if k != "seeds"}), flush=True)
            (HERE / "results" / (args.out or f"cascade_{model_name}.json")).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
