"""Prefix KV reuse: the same prompts with and without the radix cache, in one process.

    python benchmarks/engine_prefix.py [--prompts 1000]

Cases (token ids drawn at random, seeded):
  shared-prefix  N prompts = one shared 200-token prefix + a distinct 20-token tail each
  two-level      10 anchors x N/10 tails: shared 100-token prefix + 100-token anchor + 20-token tail
Both are yes/no scoring (two single-token labels), on the tiny 32k-vocabulary model. Reported per
mode: wall time, computed tokens vs the prefix-tree minimum, KV regret, forward passes, peak KV
bytes; and the largest score difference between the modes (must stay below 1e-4).
Target on a 2-core CPU: >= 6x wall-clock with reuse, computed tokens at the minimum, regret 0.
"""

from __future__ import annotations

import argparse
import random
import time

from common import bench_engine, machine, write

from aisql.engine import ScoreRequest


def shared_prefix_case(rng: random.Random, n: int) -> list[tuple[int, ...]]:
    prefix = [rng.randrange(3, 32000) for _ in range(200)]
    return [tuple(prefix + [rng.randrange(3, 32000) for _ in range(20)]) for _ in range(n)]


def two_level_case(rng: random.Random, n: int) -> list[tuple[int, ...]]:
    prefix = [rng.randrange(3, 32000) for _ in range(100)]
    prompts = []
    for _ in range(10):
        anchor = [rng.randrange(3, 32000) for _ in range(100)]
        prompts += [tuple(prefix + anchor + [rng.randrange(3, 32000) for _ in range(20)]) for _ in range(n // 10)]
    return prompts


def prefix_tree_size(prompts) -> int:
    return len({p[:i] for p in prompts for i in range(1, len(p) + 1)})


def measure(engine, requests, reuse: bool) -> tuple[dict, list]:
    before = engine.stats.copy()
    started = time.perf_counter()
    scores = engine.score(requests, reuse=reuse)
    wall = time.perf_counter() - started
    delta = engine.stats.since(before)
    return {
        "wall_s": round(wall, 3),
        "computed_tokens": delta.computed_tokens,
        "padding_tokens": delta.padding_tokens,
        "kv_hit_tokens": delta.kv_hit_tokens,
        "kv_regret_tokens": delta.kv_regret_tokens,
        "forward_passes": delta.forward_passes,
        "peak_kv_bytes": engine.stats.peak_kv_bytes,
    }, scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=1000)
    args = parser.parse_args()
    rng = random.Random(0)
    warm = bench_engine()
    labels = (warm.encode_label("TRUE"), warm.encode_label("FALSE"))
    warm.score([ScoreRequest(tuple(range(5, 60)), labels)] * 2, reuse=False)  # allocate, load kernels
    cases = {"shared-prefix": shared_prefix_case(rng, args.prompts), "two-level": two_level_case(rng, args.prompts)}
    record = {"benchmark": "engine_prefix", "model": "tiny-32k (4 layers, hidden 256, vocab 32000)", "machine": machine(), "cases": {}}
    print(f"{'case':14} {'mode':9} {'wall s':>7} {'computed':>9} {'minimum':>8} {'regret':>7} {'passes':>6}")
    for name, prompts in cases.items():
        requests = [ScoreRequest(p, labels) for p in sorted(prompts)]
        logical = sum(map(len, prompts))
        minimum = prefix_tree_size(prompts)
        no_reuse, expected = measure(bench_engine(), requests, reuse=False)
        reuse, scores = measure(bench_engine(), requests, reuse=True)
        diff = max(abs(a - b) for s, t in zip(scores, expected) for a, b in zip(s.logprobs, t.logprobs))
        case = {
            "prompts": len(prompts),
            "logical_tokens": logical,
            "prefix_tree_minimum": minimum,
            "no_reuse": no_reuse,
            "radix_reuse": reuse,
            "speedup": round(no_reuse["wall_s"] / reuse["wall_s"], 2),
            "computed_token_ratio": round(no_reuse["computed_tokens"] / reuse["computed_tokens"], 2),
            "max_score_difference": diff,
            "answers_equal": [s.best for s in scores] == [t.best for t in expected],
        }
        record["cases"][name] = case
        for mode in ("no_reuse", "radix_reuse"):
            m = case[mode]
            print(f"{name:14} {mode:9} {m['wall_s']:7.2f} {m['computed_tokens']:9} {minimum:8} {m['kv_regret_tokens']:7} {m['forward_passes']:6}")
        print(f"{'':14} speedup {case['speedup']}x, computed tokens / {case['computed_token_ratio']}, max score diff {diff:.1e}")
    print("wrote", write("engine_prefix", record))


if __name__ == "__main__":
    main()
