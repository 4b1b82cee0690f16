"""Routing across replicas (issue 47): `aisql serve --replicas 2` under interleaved agent sessions,
per routing policy, beside one replica with the same KV budget.

    python benchmarks/serve_routing.py [--sessions 16] [--turns 8] [--replicas 2]

The agent trace of benchmarks/agent_trace.py (a system prompt, a task with a tool output, then
turns that append the model's reply and the next tool output; up to `--turns` turns and ~4k
tokens of context), `--sessions` sessions at once, each its own conversation (its own files
and numbers), every session sending its next turn as soon as the last one answered. Model:
tiny-32k with a 16k context (random weights: prefill and decode cost what a real model of its
shape costs). Each replica one torch thread and the single server's KV budget; the server runs
in this process, the replicas in Ray actors. Every policy from cold caches (fresh replicas).
Between turns the agent's tool runs `--think-s` seconds on average (exponential, the same draws
in every run; 0: turns back to back, which saturates two one-thread replicas and measures
queueing more than routing).

Sessions start together, or (`--arrival-s`) one after another at exponential gaps of that mean
(seeded: the same starts in every run) — with all 16 starting at once, their 16 first turns (an
eighth of the requests, before any conversation exists to route by) queue together and set the
p90 whatever the routing.

Per policy: prefix-cache hit rate (cached / prompt tokens, from each response's usage), TTFT
p50 / p90 / p99 as the client sees it (streaming) — over all requests and over conversations'
later turns (turn >= 1, where a replica can hold the conversation) —, completion tokens per
second over the run, how many requests each replica took, and every request's row. Acceptance
(issue 47): cache-aware hit rate >= 0.9 x one replica's, TTFT p90 >= 2x lower than
round-robin's. Written to benchmarks/results/serve_routing_think<S>_kv<MB>[_arrival<S>].json.
`--kv-budget-mb`: the budget of the one server and of each replica (tiny-32k keeps 8 KB of KV
per token): 1024 holds every session's context (nothing is evicted, on any replica, whatever
the routing); 256 (32k tokens) and 128 (16k) hold fewer conversations than the 16 (~2k-3.2k
tokens each) — the agent regime, where ~100k-token contexts make a replica's KV hold a few
conversations and routing decides what stays.
"""

from __future__ import annotations

import argparse
import random
import threading
import time
from pathlib import Path

import openai
from agent_trace import AGENT_TINY, SYSTEM, stream_once, tool_output
from common import machine, run_together, write
from load_test import percentile

from aisql.engine import EngineOptions
from aisql.engine.model.loader import load_hf_directory
from aisql.engine.model.resolving import resolve_model
from aisql.engine.model.tiny import TinyConfig, tiny_model_dir
from aisql.serve.background import BackgroundServer
from aisql.serve.replicas import start_pool

MAX_CONTEXT_TOKENS = 4096


def session(base_url: str, index: int, turns: int, lines: int, think_s: float, out: list, errors: list, start_s: float = 0.0) -> None:
    time.sleep(start_s)  # sessions arriving over time (--arrival-s); 0: all at once
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=900)
    rng = random.Random(1000 + index)
    tools = random.Random(2000 + index)  # how long each tool runs: the same in every policy's run
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Session {index}: fix the failing test in pkg_{index}. " + tool_output(rng, 0, lines)},
    ]
    for turn in range(turns):
        try:
            result = stream_once(client, model="agent", messages=messages, max_tokens=24, temperature=0)
        except Exception as err:  # noqa: BLE001 - counted, the run goes on
            errors.append(f"session {index} turn {turn}: {err}")
            return
        usage = result["usage"]
        out.append(
            {
                "session": index,
                "turn": turn,
                "prompt_tokens": usage.prompt_tokens,
                "cached_tokens": usage.prompt_tokens_details.cached_tokens,
                "completion_tokens": usage.completion_tokens,
                "ttft_s": result["ttft_s"],
            }
        )
        if usage.prompt_tokens + usage.completion_tokens + 65 * lines + 20 > MAX_CONTEXT_TOKENS:  # the next turn would not fit
            return
        messages += [
            {"role": "assistant", "content": result["text"]},
            {"role": "user", "content": tool_output(rng, turn + 1, lines)},
        ]
        if think_s:
            time.sleep(tools.expovariate(1 / think_s))  # the tool runs before the next turn


def run_sessions(base_url: str, sessions: int, turns: int, lines: int, think_s: float = 0.0, arrival_s: float = 0.0) -> dict:
    out: list[dict] = []
    errors: list[str] = []
    arrivals = random.Random(3000)  # the same start times in every policy's run
    starts, clock = [], 0.0
    for _ in range(sessions):
        starts.append(clock)
        clock += arrivals.expovariate(1 / arrival_s) if arrival_s else 0.0
    threads = [
        threading.Thread(target=session, args=(base_url, i, turns, lines, think_s, out, errors, starts[i])) for i in range(sessions)
    ]
    wall = run_together(threads)
    ttfts = [r["ttft_s"] for r in out]
    later = [r["ttft_s"] for r in out if r["turn"] > 0]  # a conversation's later turns: where routing can find its prefix
    prompt = sum(r["prompt_tokens"] for r in out)
    cached = sum(r["cached_tokens"] for r in out)
    return {
        "requests": len(out),
        "errors": errors,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "hit_rate": round(cached / max(1, prompt), 4),
        "ttft_p50_s": round(percentile(ttfts, 0.5), 4),
        "ttft_p90_s": round(percentile(ttfts, 0.9), 4),
        "ttft_p99_s": round(percentile(ttfts, 0.99), 4),
        "later_turns_ttft_p50_s": round(percentile(later, 0.5), 4) if later else None,
        "later_turns_ttft_p90_s": round(percentile(later, 0.9), 4) if later else None,
        "requests_detail": sorted(({k: r[k] for k in ("session", "turn", "prompt_tokens", "cached_tokens", "ttft_s")} for r in out), key=lambda r: (r["session"], r["turn"])),
        "wall_s": round(wall, 2),
        "completion_tokens_per_s": round(sum(r["completion_tokens"] for r in out) / wall, 2),
        "requests_per_s": round(len(out) / wall, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--tool-lines", type=int, default=5, help="lines of tool output per turn (~65 tokens each)")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--policies", default="cache-aware,round-robin,least-load")
    parser.add_argument("--kv-budget-mb", type=int, default=1024, help="each replica's (and the one server's) prefix-cache budget")
    parser.add_argument("--arrival-s", type=float, default=0.0, help="mean seconds between sessions' starts (exponential, seeded); 0: all start at once")
    parser.add_argument("--think-s", type=float, default=20.0, help="mean seconds a tool runs between turns (exponential, seeded per session); 0: back to back")
    args = parser.parse_args()
    directory = str(tiny_model_dir(TinyConfig(**AGENT_TINY)))
    options = EngineOptions(device="cpu", threads=1, kv_budget=args.kv_budget_mb << 20)
    record = {
        "benchmark": "serve_routing",
        "machine": machine(),
        "model": "tiny-32k, 16k context (8 layers, hidden 512, random weights)",
        "sessions": args.sessions,
        "turns": args.turns,
        "tool_lines": args.tool_lines,
        "replicas": args.replicas,
        "kv_budget_bytes": args.kv_budget_mb << 20,
        "think_s": args.think_s,
        "arrival_s": args.arrival_s,
        "policies": {},
    }

    engine = load_hf_directory(Path(directory), name="agent", options=options, source="built offline", is_test=True)
    with BackgroundServer(engine, "agent") as server:
        record["one_replica"] = one = run_sessions(server.base_url, args.sessions, args.turns, args.tool_lines, args.think_s, args.arrival_s)
    del engine
    print("one replica", {k: v for k, v in one.items() if k != "requests_detail"}, flush=True)

    for policy in args.policies.split(","):
        pool, front = start_pool(
            resolve_model(directory), options, replicas=args.replicas, routing=policy, serving={}, threads=1
        )
        with BackgroundServer(front, "agent", replicas=pool) as server:
            result = run_sessions(server.base_url, args.sessions, args.turns, args.tool_lines, args.think_s, args.arrival_s)
            result["routed"] = [slot.routed for slot in pool.slots]
        record["policies"][policy] = result
        print(policy, {k: v for k, v in result.items() if k != "requests_detail"}, flush=True)

    aware, rr = record["policies"].get("cache-aware"), record["policies"].get("round-robin")
    if aware and rr:
        record["acceptance"] = {
            "hit_rate_vs_one_replica": round(aware["hit_rate"] / max(1e-9, one["hit_rate"]), 3),
            "ttft_p90_round_robin_over_cache_aware": round(rr["ttft_p90_s"] / max(1e-9, aware["ttft_p90_s"]), 2),
            "later_turns_ttft_p90_round_robin_over_cache_aware": round(rr["later_turns_ttft_p90_s"] / max(1e-9, aware["later_turns_ttft_p90_s"]), 2),
        }
        print("acceptance", record["acceptance"])
    arrival = f"_arrival{args.arrival_s:g}" if args.arrival_s else ""
    write(f"serve_routing_think{args.think_s:g}_kv{args.kv_budget_mb}{arrival}", record)


if __name__ == "__main__":
    main()
