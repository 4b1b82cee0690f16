"""Speculative (prompt-lookup) vs plain greedy decoding on copy-heavy prompts, in one process.

    python benchmarks/engine_decode.py [--prompts 32]

The model (benchmarks/copy_model.py, trained here once) extracts a field from a record, copying
20-40 tokens from its input: the shape of "extract the address from this document" queries.
Both modes run on the same engine with the prompts' KV cached, so the difference is decoding
alone. Outputs must be identical token for token. Target: >= 1.5x tokens/s with speculation.
"""

from __future__ import annotations

import argparse
import random
import time

from common import machine, write
from copy_model import copy_model_dir, field_task

from aisql.engine import EngineOptions, GenerateRequest
from aisql.engine.model.loader import load_hf_directory


def run(engine, requests, speculative: bool) -> tuple[dict, list]:
    before = engine.stats.copy()
    started = time.perf_counter()
    outputs = engine.generate(requests, speculative=speculative)
    wall = time.perf_counter() - started
    delta = engine.stats.since(before)
    generated = sum(len(g.token_ids) for g in outputs)
    return {
        "wall_s": round(wall, 3),
        "generated_tokens": generated,
        "tokens_per_s": round(generated / wall, 1),
        "decode_passes": delta.decode_passes,
        "tokens_per_decode_pass": round(delta.generated_tokens / max(1, delta.decode_passes), 2),
        "draft_tokens": delta.draft_tokens,
        "draft_accepted": delta.draft_accepted_tokens,
        "acceptance": round(delta.draft_accepted_tokens / delta.draft_tokens, 3) if delta.draft_tokens else None,
    }, outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=32)
    args = parser.parse_args()
    engine = load_hf_directory(copy_model_dir(), name="copy-model", options=EngineOptions(), source="trained here")
    rng = random.Random(1)
    tasks = [field_task(rng, 5, 20, 40) for _ in range(args.prompts)]
    requests = [GenerateRequest(tuple(prompt), 80) for prompt, _ in tasks]
    engine.generate(requests, speculative=False)  # warm up; caches every prompt's KV
    record = {"benchmark": "engine_decode", "model": "copy model (2 layers, hidden 128, trained here)", "machine": machine(), "cases": {}}
    print(f"{'case':12} {'mode':11} {'tok/s':>7} {'passes':>6} {'tok/pass':>8} {'acceptance':>10}")
    for case, batches in (("one-by-one", [[r] for r in requests]), ("batched", [requests])):
        results = {}
        for mode, speculative in (("greedy", False), ("speculative", True)):
            parts = [run(engine, batch, speculative) for batch in batches]
            outputs = [g for _, out in parts for g in out]
            wall = sum(p["wall_s"] for p, _ in parts)
            generated = sum(p["generated_tokens"] for p, _ in parts)
            passes = sum(p["decode_passes"] for p, _ in parts)
            drafts = sum(p["draft_tokens"] for p, _ in parts)
            accepted = sum(p["draft_accepted"] for p, _ in parts)
            results[mode] = {
                "wall_s": round(wall, 3),
                "generated_tokens": generated,
                "tokens_per_s": round(generated / wall, 1),
                "decode_passes": passes,
                "tokens_per_decode_pass": round(generated / max(1, passes), 2),
                "acceptance": round(accepted / drafts, 3) if drafts else None,
                "_outputs": [g.token_ids for g in outputs],
            }
            r = results[mode]
            print(f"{case:12} {mode:11} {r['tokens_per_s']:7.1f} {passes:6} {r['tokens_per_decode_pass']:8} {str(r['acceptance']):>10}")
        identical = results["greedy"].pop("_outputs") == results["speculative"].pop("_outputs")
        copied = sum(
            list(g) == answer[:-1]
            for g, (_, answer) in zip(
                [g.token_ids for g in engine.generate(requests, speculative=False)], tasks
            )
        )
        speedup = round(results["speculative"]["tokens_per_s"] / results["greedy"]["tokens_per_s"], 2)
        record["cases"][case] = {**results, "identical_outputs": identical, "speedup": speedup, "fields_copied_exactly": f"{copied}/{len(tasks)}"}
        print(f"{'':12} speedup {speedup}x, identical outputs: {identical}, fields copied exactly: {copied}/{len(tasks)}")
    print("wrote", write("engine_decode", record))


if __name__ == "__main__":
    main()
