"""What `aisql explain` says a query will take against what `aisql run` then takes, on a machine
that starts with nothing (a fresh cache directory: no converted GGUF, no measured speed), in the
order a new user meets it (issue 60): SmolLM2 first (the README's model), scoring then generation;
then Qwen2.5-Coder-0.5B, a new GGUF, scoring then generation.

    python benchmarks/explain_vs_run.py [--models smollm2,qwen-0.5b] [--keep DIR]

Explain's figure is its whole promise: the plan's time plus every first-run cost it names (GGUF
conversion, the number-format trial, the model load). The run's is the wall time of `aisql run`
as a subprocess (start-up, conversion, load and answers). Ratio = run / explain; the acceptance
asks for 1/1.5 <= ratio <= 1.5 on an idle machine. Results: results/explain_vs_run.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import model_argument

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
AISQL = [sys.executable, "-m", "aisql"]
QUERIES = {
    "scoring": (
        "SELECT c.name, p.name FROM 'data/customers.csv' AS c JOIN 'data/products.csv' AS p "
        "ON AI.IF(PROMPT('{c.profile} might buy this: {p.description}')) WHERE c.country = 'Germany' AND p.price < 100"
    ),
    "generation": (
        "SELECT name, AI.GENERATE(PROMPT('In three words, what would this person like as a gift? {profile}'), max_tokens => 16) AS gift "
        "FROM 'data/customers.csv' WHERE country = 'Germany'"
    ),
}


def explained_seconds(model: str, query: str, env: dict) -> dict:
    out = subprocess.run([*AISQL, "explain", "--model", model, "--format", "json", "-e", query], capture_output=True, text=True, env=env, cwd=ROOT / "examples", check=True)
    data = json.loads(out.stdout)
    plan = sum(s["totals"]["plan"]["time_s"] for s in data["statements"] if s.get("totals"))
    first = sum((data.get("first_run") or {}).values())
    load = data.get("model_load_s") or 0.0
    overhead = data.get("run_overhead_s") or 0.0
    return {"plan_s": round(plan, 2), "first_run_s": round(first, 2), "first_run": data.get("first_run"), "load_s": load, "overhead_s": overhead,
            "total_s": round(plan + first + load + overhead, 2), "speed_source": data.get("speed_source")}


def run_seconds(model: str, query: str, env: dict) -> float:
    started = time.perf_counter()
    subprocess.run([*AISQL, "run", "--model", model, "--format", "csv", "-e", query], capture_output=True, text=True, env=env, cwd=ROOT / "examples", check=True)
    return round(time.perf_counter() - started, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="smollm2,qwen-0.5b")
    parser.add_argument("--keep", help="the cache directory to start from (default: a fresh one)")
    args = parser.parse_args()
    directory = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="aisql-first-run-"))
    env = dict(os.environ, AISQL_CACHE_DIR=str(directory))
    rows = []
    for name in args.models.split(","):
        model = model_argument(name)
        for kind, query in QUERIES.items():
            explained = explained_seconds(model, query, env)
            ran = run_seconds(model, query, env)
            row = {"model": name, "kind": kind, "explain": explained, "run_s": ran, "ratio": round(ran / explained["total_s"], 2) if explained["total_s"] else None}
            rows.append(row)
            print(json.dumps(row), flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "explain_vs_run.json").write_text(json.dumps({"cache_dir_fresh": not args.keep, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
