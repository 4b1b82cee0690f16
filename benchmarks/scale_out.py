"""Scale-out benchmark: the hot-leads query (run.py's Q1) on Ray workers, and a simulated plan.

    python benchmarks/scale_out.py [--scale 4.8] [--only run,simulate] [--pairs 10000000] [--workers 64]

1. Q1 at a scale with >= 10,000 prompts on the tiny-32k model, from a cold cache: today's single
   engine on 2 threads, then 1 and 2 Ray workers with one thread each (a local Ray runtime on
   this 2-core machine). Per configuration: wall time of the query (workers already started;
   their start is reported apart), prompts, computed tokens, per-worker prompts / tokens / busy
   time, the prefix tokens the split repeated, and whether the rows equal the single engine's.
2. A simulated plan for a 10M-pair AI join (customers x products, Q1's prompt) on 64 workers:
   `aisql explain --workers 64` on the H100 profile for SmolLM2's shape and tokenizer — DuckDB's
   per-anchor counts and the cost model, no prompt rendered, nothing run — shard sizes,
   per-worker balance, expected makespan.

Writes benchmarks/results/scale_out.json.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from common import BENCH_TINY, machine, write
from datagen import customers, products, tables
from run import QUERIES

import aisql
from aisql.executor.cluster.pool import ClusterOptions


def model_directory() -> str:
    from aisql.engine.model.tiny import TinyConfig, tiny_model_dir

    return str(tiny_model_dir(TinyConfig(**BENCH_TINY)))


def load(con, data) -> None:
    for name, table in data.items():
        con.duckdb.register(f"__{name}", table)
        con.duckdb.execute(f"CREATE TABLE {name} AS SELECT * FROM __{name}")


def run_config(name: str, data, workers: int | None) -> dict:
    """One configuration, cold: its engine(s) started first (timed apart), then the query."""
    if workers is None:
        torch.set_num_threads(2)
        con = aisql.connect(model=model_directory(), cache=False)
    else:
        con = aisql.connect(model=model_directory(), cache=False, cluster=ClusterOptions(workers=workers, threads=1))
    load(con, data)
    started = time.perf_counter()
    con.engine  # load the model, or start the workers and load it in each
    start_s = time.perf_counter() - started
    started = time.perf_counter()
    result = con.run(QUERIES["Q1_hot_leads"])
    wall = time.perf_counter() - started
    totals = result.stats.totals()
    out = {
        "config": name,
        "workers": workers,
        "start_s": round(start_s, 2),
        "wall_s": round(wall, 3),
        "rows_out": result.table.num_rows,
        "prompts_evaluated": totals["prompts_evaluated"],
        "logical_tokens": totals["logical_tokens"],
        "computed_tokens": totals["computed_tokens"],
        "prefix_recompute_tokens": sum(n.prefix_recompute_tokens for n in result.stats.nodes),
        "per_worker": result.stats.workers() or None,
        "_rows": sorted(map(repr, result.table.to_pylist())),
    }
    if out["per_worker"]:
        busy = [w["busy_s"] for w in out["per_worker"].values()]
        prompts = [w["prompts"] for w in out["per_worker"].values()]
        out["balance_busy"] = round(sum(busy) / (len(busy) * max(busy)), 4)
        out["balance_prompts"] = round(sum(prompts) / (len(prompts) * max(prompts)), 4)
        out["shards"] = sum(w["shards"] for w in out["per_worker"].values())
    con.close()
    print(json.dumps({k: v for k, v in out.items() if not k.startswith("_")}), flush=True)
    return out


def measured(scale: float) -> dict:
    data = tables(scale=scale)
    runs = [run_config("single engine, 2 threads", data, None)]
    runs.append(run_config("1 Ray worker, 1 thread", data, 1))
    runs.append(run_config("2 Ray workers, 1 thread each", data, 2))
    single, one, two = runs
    for r in runs:
        r["rows_equal_single_engine"] = r.pop("_rows") == single.get("_rows", r.get("_rows")) if r is not single else True
    single.pop("_rows", None)
    return {
        "scale": scale,
        "runs": runs,
        "speedup_2_workers_over_1_worker": round(one["wall_s"] / two["wall_s"], 3),
        "speedup_2_workers_over_single_engine_2_threads": round(single["wall_s"] / two["wall_s"], 3),
        "computed_tokens_2_workers_minus_single": two["computed_tokens"] - single["computed_tokens"],
    }


def simulated(pairs: int, workers: int, model: str) -> dict:
    """explain --workers on a customers x products AI join of `pairs` pairs (nothing runs):
    `model`'s tokenizer and shape (smollm2 by default: a real model's cost, read without weights)."""
    import random

    products_n = 1000
    customers_n = max(1, pairs // products_n)
    rng = random.Random(0)
    con = aisql.connect(model=model, cache=False)
    load(con, {"customers": customers(rng, customers_n), "products": products(rng, products_n)})
    sql = "SELECT c.id, p.id FROM customers c JOIN products p ON AI.IF(PROMPT('{c.profile} might buy this: {p.description}'))"
    started = time.perf_counter()
    explanation = con.explain(sql, hardware="h100", workers=workers)
    explain_s = time.perf_counter() - started
    node = explanation.to_dict()["statements"][0]["ai_nodes"][0]
    plan = node["shard_plan"]
    single = explanation.to_dict()["statements"][0]["ai_nodes"][0]["plan"]
    con.close()
    out = {
        "pairs": customers_n * products_n,
        "customers": customers_n,
        "products": products_n,
        "workers": workers,
        "model": model,
        "hardware": "h100 (roofline profile)",
        "explain_s": round(explain_s, 2),
        "prompts_unique": node["prompts_unique"],
        "single_engine": {"tokens": single["tokens"], "time_s": round(single["time_s"], 1)},
        "shard_plan": plan,
        "expected_makespan_s": round(plan["expected_s"], 1) if plan.get("expected_s") is not None else None,
    }
    print(json.dumps(out), flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=4.8, help="datagen scale of Q1 (4.8: ~11,000 prompts)")
    parser.add_argument("--only", default="run,simulate")
    parser.add_argument("--pairs", type=int, default=10_000_000)
    parser.add_argument("--workers", type=int, default=64, help="workers of the simulated plan")
    parser.add_argument("--sim-model", default="smollm2", help="the model the simulated plan is costed for")
    args = parser.parse_args()
    parts = set(args.only.split(","))
    result = {"benchmark": "scale_out", "model": "tiny-32k", "machine": machine()}
    if "run" in parts:
        result["measured"] = measured(args.scale)
    if "simulate" in parts:
        result["simulated"] = simulated(args.pairs, args.workers, args.sim_model)
    write("scale_out", result)


if __name__ == "__main__":
    main()
