"""The forward passes of one planned query, this tree beside another (the starting commit): how
many, how many tokens each, of which kind (issue 61's "fewer, fuller passes").

    git worktree add /tmp/base <commit>
    python benchmarks/pass_structure.py --baseline /tmp/base [--query Q4]

Each tree runs benchmarks/run.py's query once, planned, cold prefix cache, fixed checkpoint
chunks (tiny-32k, as run.py), in a fresh interpreter whose `aisql` is that tree's; every forward
pass is recorded where the engine makes it: a flat pass (its segments, the prefix groups, the
segments reading an in-pass parent, its tokens) or a padded pass (rows x width). The workload is
this tree's definition for both. Results: results/pass_structure_<query>.json.
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


def child(query: str) -> dict:
    from common import bench_engine
    from datagen import tables
    from run import QUERIES, run_once

    from aisql.engine.batch import flat
    from aisql.engine.batch.model_runner import ModelRunner

    passes: list[dict] = []
    run_flat, forward = flat.run_flat, ModelRunner.forward

    def recording_flat(model, decoder, cache_kwarg, radix, segments, pad_id):
        started = time.perf_counter()
        out = run_flat(model, decoder, cache_kwarg, radix, segments, pad_id)
        passes.append({
            "kind": "flat", "tokens": sum(len(s.tokens) for s in segments), "segments": len(segments),
            "reading_in_pass": sum(getattr(s, "reads", None) is not None for s in segments),
            "label_tails": sum(s.parent is not None for s in segments), "ms": round(1000 * (time.perf_counter() - started), 1),
        })
        return out

    def recording_forward(self, ids, cache, attention_mask=None, position_ids=None):
        started = time.perf_counter()
        out = forward(self, ids, cache, attention_mask, position_ids)
        passes.append({"kind": "padded", "tokens": int(ids.numel()), "rows": int(ids.shape[0]), "ms": round(1000 * (time.perf_counter() - started), 1)})
        return out

    flat.run_flat = recording_flat
    ModelRunner.forward = recording_forward
    name = next(n for n in QUERIES if n.startswith(query))
    engine = bench_engine()
    data = tables(1.0)
    run_once(engine, data, QUERIES[name], naive=False, fixed_chunks=True)  # warm-up
    passes.clear()
    result = run_once(engine, data, QUERIES[name], naive=False, fixed_chunks=True)
    return {"passes": passes, "wall_s": result["wall_s"], "computed_tokens": result["computed_tokens"], "rows": result["_rows"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path)
    parser.add_argument("--query", default="Q4")
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.query)))
        return
    from common import machine, write

    record = {"benchmark": "pass_structure", "query": args.query, "machine": machine(), "trees": {}}
    for label, tree in (("baseline", args.baseline), ("this tree", HERE.parent)):
        env = dict(os.environ, PYTHONPATH=str(tree))
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", "--query", args.query],
                              capture_output=True, text=True, env=env, cwd=str(tree), check=True)
        record["trees"][label] = json.loads(done.stdout.strip().splitlines()[-1])
        passes = record["trees"][label]["passes"]
        print(f"{label}: {len(passes)} passes, {sum(p['tokens'] for p in passes):,} tokens, wall {record['trees'][label]['wall_s']} s")
        for p in passes:
            print("   ", {k: v for k, v in p.items()})
    trees = record["trees"]
    record["same_rows"] = trees["baseline"]["rows"] == trees["this tree"]["rows"]
    for tree in trees.values():
        tree.pop("rows")
    print("same rows:", record["same_rows"])
    write(f"pass_structure_{args.query}", record)


if __name__ == "__main__":
    main()
