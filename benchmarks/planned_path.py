"""Where the time goes in the planned path, and what each engine change bought.

    python benchmarks/planned_path.py [--model tiny-32k|qwen-0.5b] [--customers 40] [--products 60]

An AI join the engine has not seen (customers x products from datagen, cold prefix cache, no
result cache), run planned and naive in one process at one thread (CPU seconds, the machine is
shared), under each engine configuration in turn:
- `before`: PyTorch's default matmul and the block-masked group attention;
- `+ oneDNN linear`: the linear layers on oneDNN with packed weights (aisql.engine.model.linear_kernels);
- `+ batched groups`: short independent suffixes after one prefix attend as a padded batch
  (aisql.engine.batch.flat), i.e. today's engine.
For each: wall and CPU seconds, computed tokens, tokens per CPU second, the planned/naive ratios,
and where the planned run's CPU went (torch profiler, by operator: linear layers, attention,
the rest of the model's tensor work, and Python outside torch). Answers are compared across
configurations. Results: results/planned_path_<model>.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import BENCH_TINY, machine, model_argument, write  # noqa: E402
from datagen import tables  # noqa: E402

import aisql  # noqa: E402

JOIN = """
SELECT c.id AS customer, p.id AS product
FROM customers c JOIN products p ON AI.IF(PROMPT('{c.profile} might buy this: {p.description}'))
ORDER BY 1, 2"""

CONFIGS = {
    "before": {"kernel": "default", "batched": False},
    "+ oneDNN linear": {"kernel": "onednn", "batched": False},
    "+ batched groups (today)": {"kernel": "onednn", "batched": True},
}


def load(model: str, kernel: str):
    os.environ["AISQL_LINEAR_KERNEL"] = kernel
    from aisql.engine import EngineOptions

    if model == "tiny-32k":
        from aisql.engine.model.loader import load_hf_directory
        from aisql.engine.model.tiny import TinyConfig, tiny_model_dir

        directory = tiny_model_dir(TinyConfig(**BENCH_TINY))
        return load_hf_directory(directory, name="tiny-32k", options=EngineOptions(threads=1), source="built offline", is_test=True)
    from aisql.engine import load_engine

    return load_engine(model_argument(model), EngineOptions(threads=1))


def run(engine, data, naive: bool) -> tuple[dict, list]:
    engine.reset_cache()
    con = aisql.Connection(engine=engine, cache=False)
    for name, table in data.items():
        con.duckdb.register(name, table)
    before = engine.stats.copy()
    wall, cpu = time.perf_counter(), time.process_time()
    result = con.run(JOIN, naive=naive)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    work = engine.stats.since(before)
    con.close()
    stats = {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "computed_tokens": work.computed_tokens, "passes": work.forward_passes}
    if work.tie_confirmed_prompts:  # bfloat16 near ties answered in float32: their CPU is in cpu_s, their tokens apart
        stats.update(tie_confirmed_prompts=work.tie_confirmed_prompts, tie_confirmed_tokens=work.tie_confirmed_tokens)
    stats["tokens_per_cpu_s"] = round(work.computed_tokens / cpu) if cpu else None
    return stats, result.table.to_pylist()


def profile(engine, data, timed_cpu_s: float) -> dict:
    """The planned run's CPU by operator kind (torch profiler, self CPU time of a second, profiled
    run); the rest is the timed run's CPU less the operators' (the profiler's own overhead is not
    in the timed run)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    engine.reset_cache()
    con = aisql.Connection(engine=engine, cache=False)
    for name, table in data.items():
        con.duckdb.register(name, table)
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        con.run(JOIN)
    con.close()
    cpu = timed_cpu_s
    kinds = {"linear layers": 0.0, "attention": 0.0, "other tensor ops": 0.0}
    for event in prof.key_averages():
        name, seconds = event.key, event.self_cpu_time_total / 1e6
        if "linear" in name or "addmm" in name or name in ("aten::mm", "aten::matmul", "aten::bmm"):
            kinds["linear layers"] += seconds
        elif "scaled_dot_product" in name or "flash_attention" in name or "_efficient_attention" in name or name == "aten::_softmax":
            kinds["attention"] += seconds
        else:
            kinds["other tensor ops"] += seconds
    torch_total = sum(kinds.values())
    kinds["python, planning, DuckDB (the rest)"] = max(cpu - torch_total, 0.0)
    return {k: {"cpu_s": round(v, 2), "share": round(v / cpu, 3) if cpu else None} for k, v in kinds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-32k")
    parser.add_argument("--customers", type=int, default=40)
    parser.add_argument("--products", type=int, default=60)
    parser.add_argument("--no-naive", action="store_true")
    args = parser.parse_args()
    import torch

    from aisql.engine.batch import flat

    torch.set_num_threads(1)
    full = tables(1.0)
    data = {"customers": full["customers"].slice(0, args.customers), "products": full["products"].slice(0, args.products)}
    out = {"model": args.model, "join": f"{args.customers} x {args.products}", "threads": 1, "machine": machine(), "configs": {}}
    answers = {}
    for name, config in CONFIGS.items():
        flat.BATCH_WHEN_BELOW = 0.7 if config["batched"] else 0.0
        engine = load(args.model, config["kernel"])
        run(engine, {k: v.slice(0, 2) for k, v in data.items()}, naive=False)  # warm-up
        if getattr(engine, "tie_confirmation", None) is not None:
            engine.tie_confirmation.reference()  # bfloat16's float32 reference loaded now, not in the first timed near tie
        planned, rows = run(engine, data, naive=False)
        record = {"planned": planned}
        if not args.no_naive:
            naive, naive_rows = run(engine, data, naive=True)
            record["naive"] = naive
            record["token_ratio"] = round(naive["computed_tokens"] / planned["computed_tokens"], 2)
            record["cpu_ratio"] = round(naive["cpu_s"] / planned["cpu_s"], 2)
            record["planned_equals_naive"] = naive_rows == rows
        record["planned_profile"] = profile(engine, data, planned["cpu_s"])
        answers[name] = rows
        record["same_rows_as_before"] = rows == answers["before"]
        out["configs"][name] = record
        print(name, {k: v for k, v in record.items() if k != "planned_profile"}, flush=True)
        del engine
    flat.BATCH_WHEN_BELOW = 0.7
    os.environ.pop("AISQL_LINEAR_KERNEL", None)
    write(f"planned_path_{args.model}", out)


if __name__ == "__main__":
    main()
