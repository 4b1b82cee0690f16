"""A bounded load test of `aisql serve` on loopback: N concurrent streaming clients, a fixed number
of chat requests each; it stops by itself. Continuous batching (up to 64 running requests) vs
one request at a time (--max-running 1), same engine and requests.

    python benchmarks/load_test.py [--clients 16] [--requests 4] [--max-tokens 32]

Each request: a shared system prompt (~200 tokens, reused from the radix cache after the first
request), a distinct user message (~100 tokens), greedy, streamed with logprobs so every token
arrives as a chunk. Recorded: errors, TTFT p50/p99, inter-token latency p50/p99, generated tokens
per second over the whole run. Model: tiny-32k (random weights). Written to
benchmarks/results/load_test.json.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import openai
from common import bench_engine, machine, write

from aisql.serve.background import BackgroundServer

SYSTEM = "You are a support assistant for an online shop. Be brief, be polite, and answer in one sentence. " * 8


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def one_request(client, text: str, max_tokens: int) -> dict:
    started = time.perf_counter()
    times = []
    tokens = 0
    try:
        stream = client.chat.completions.create(
            model="load",
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}],
            max_tokens=max_tokens,
            temperature=0,
            stream=True,
            logprobs=True,
            stream_options={"include_usage": True},
        )
        for chunk in stream:
            if chunk.usage is not None:
                tokens = chunk.usage.completion_tokens
            if chunk.choices and chunk.choices[0].logprobs and chunk.choices[0].logprobs.content:
                times.extend([time.perf_counter()] * len(chunk.choices[0].logprobs.content))
    except openai.OpenAIError as err:
        return {"error": f"{type(err).__name__}: {err}"}
    gaps = [b - a for a, b in zip(times, times[1:]) if b > a]
    return {"ttft_s": times[0] - started if times else None, "gaps": gaps, "tokens": tokens, "end": time.perf_counter()}


def load(base_url: str, clients: int, per_client: int, max_tokens: int) -> dict:
    rng = random.Random(0)
    texts = [
        f"Customer {i}: my order #{rng.randint(10000, 99999)} of {rng.choice(['shoes', 'a lamp', 'a chair', 'tea'])} "
        + " ".join(rng.choice(["late", "broken", "wrong size", "refund", "where is it", "thanks"]) for _ in range(30))
        for i in range(clients * per_client)
    ]
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=600)

    def worker(c: int) -> list[dict]:
        return [one_request(client, texts[c * per_client + r], max_tokens) for r in range(per_client)]

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        results = [r for rs in pool.map(worker, range(clients)) for r in rs]
    wall = time.perf_counter() - started
    ok = [r for r in results if "error" not in r]
    ttfts = [r["ttft_s"] for r in ok if r["ttft_s"] is not None]
    gaps = [g for r in ok for g in r["gaps"]]
    generated = sum(r["tokens"] for r in ok)
    return {
        "requests": len(results),
        "errors": len(results) - len(ok),
        "error_samples": [r["error"] for r in results if "error" in r][:3],
        "wall_s": round(wall, 2),
        "generated_tokens": generated,
        "tokens_per_s": round(generated / wall, 1),
        "ttft_p50_ms": round(1000 * statistics.median(ttfts), 1),
        "ttft_p99_ms": round(1000 * percentile(ttfts, 0.99), 1),
        "itl_p50_ms": round(1000 * statistics.median(gaps), 2) if gaps else None,
        "itl_p99_ms": round(1000 * percentile(gaps, 0.99), 2) if gaps else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=4, help="requests per client")
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()
    engine = bench_engine()
    record = {
        "benchmark": "load_test",
        "model": "tiny-32k (random weights)",
        "machine": machine(),
        "clients": args.clients,
        "requests_per_client": args.requests,
        "max_tokens": args.max_tokens,
        "modes": {},
    }
    for mode, max_running in (("continuous_batching", 64), ("one_at_a_time", 1)):
        engine.reset_cache()
        with BackgroundServer(engine, "load", max_running=max_running) as server:
            load(server.base_url, 2, 1, 4)  # warm-up
            result = load(server.base_url, args.clients, args.requests, args.max_tokens)
            result["prefix_hit_tokens"] = server.api.serving.stats.prefix_hit_tokens
        record["modes"][mode] = result
        print(f"{mode}: {result}")
    a, b = record["modes"]["continuous_batching"], record["modes"]["one_at_a_time"]
    record["throughput_ratio"] = round(a["tokens_per_s"] / b["tokens_per_s"], 2)
    print(f"throughput x{record['throughput_ratio']} -> {write('load_test', record)}")


if __name__ == "__main__":
    main()
