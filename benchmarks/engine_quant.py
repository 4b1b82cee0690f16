"""Opt-in quantization: scoring speed and deviation from full precision, in one process.

    python benchmarks/engine_quant.py [--prompts 500]

Same prompts, same model (tiny 32k-vocabulary, random weights), float32 vs each quantization the
device supports. Reported: wall time, speedup, the largest and mean difference of label
log-probabilities, and how many answers agree. Random weights make the deviation pessimistic
(their logits are near ties); the speed ratio is what carries over to real models.
"""

from __future__ import annotations

import argparse
import random
import time

from common import bench_engine, machine, write

from aisql.engine import ScoreRequest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=500)
    args = parser.parse_args()
    rng = random.Random(0)
    prefix = [rng.randrange(3, 32000) for _ in range(100)]
    prompts = sorted(tuple(prefix + [rng.randrange(3, 32000) for _ in range(rng.randint(20, 120))]) for _ in range(args.prompts))
    record = {"benchmark": "engine_quant", "model": "tiny-32k (4 layers, hidden 256, vocab 32000)", "machine": machine(), "modes": {}}
    reference = None
    print(f"{'mode':8} {'wall s':>7} {'speedup':>8} {'max |dlogp|':>12} {'mean |dlogp|':>12} {'answers equal':>14}")
    for mode in (None, "int8", "fp8", "bf16"):
        engine = bench_engine(quantize=mode)
        labels = (engine.encode_label("TRUE"), engine.encode_label("FALSE"))
        requests = [ScoreRequest(p, labels) for p in prompts]
        engine.score(requests[:8], reuse=False)  # warm up
        started = time.perf_counter()
        scores = engine.score(requests, reuse=False)
        wall = time.perf_counter() - started
        if reference is None:
            reference = (wall, scores)
        diffs = [abs(a - b) for s, t in zip(scores, reference[1]) for a, b in zip(s.logprobs, t.logprobs)]
        agree = sum(s.best == t.best for s, t in zip(scores, reference[1]))
        name = mode or "float32"
        record["modes"][name] = {
            "wall_s": round(wall, 3),
            "speedup": round(reference[0] / wall, 2),
            "max_abs_logprob_diff": max(diffs),
            "mean_abs_logprob_diff": sum(diffs) / len(diffs),
            "answers_equal": f"{agree}/{len(scores)}",
            "note": engine.info.note,
        }
        r = record["modes"][name]
        print(f"{name:8} {wall:7.2f} {r['speedup']:7.2f}x {r['max_abs_logprob_diff']:12.4f} {r['mean_abs_logprob_diff']:12.5f} {r['answers_equal']:>14}")
    print("wrote", write("engine_quant", record))


if __name__ == "__main__":
    main()
