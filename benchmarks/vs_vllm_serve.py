"""`aisql serve` beside `vllm serve` on the same weights: the agent trace (TTFT per turn as the
context grows, prefix caching on in both) and the load test (concurrent streaming clients: TTFT,
inter-token latency p50/p99, generated tokens/s).

    python benchmarks/vs_vllm_serve.py --vllm-python /path/to/vllm-venv/bin/python [--turns 14]

Model: tiny-32k with a 16k context (benchmarks/agent_trace.py's), float32 in both. vLLM: its
OpenAI server from its own environment, automatic prefix caching on with 32-token blocks (its
CPU backend's granularity for cache hits), prompt-token details on so `cached_tokens` is
reported. One server runs at a time; each is warmed up with a short trace first. The clients are
agent_trace.py's and load_test.py's, unchanged. Written to results/vs_vllm_serve.json.
"""

from __future__ import annotations

import argparse
import socket
import sys
import urllib.request
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from agent_trace import AGENT_TINY, agent_session  # noqa: E402
from common import machine, server_process, write  # noqa: E402
from load_test import load  # noqa: E402

from aisql.engine import EngineOptions  # noqa: E402
from aisql.engine.model.loader import load_hf_directory  # noqa: E402
from aisql.engine.model.tiny import TinyConfig, tiny_model_dir  # noqa: E402
from aisql.serve.background import BackgroundServer  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def vllm_server(python: str, model_dir: Path, max_model_len: int):
    """`vllm serve` in its own environment, up once /health answers; stopped on exit."""
    port = free_port()
    command = [
        python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
        "--served-model-name", "agent", "load", "--port", str(port), "--host", "127.0.0.1",
        "--dtype", "float32", "--max-model-len", str(max_model_len), "--block-size", "32",
        "--enable-prefix-caching", "--enable-prompt-tokens-details", "--gpu-memory-utilization", "0.3", "--seed", "0",
    ]
    # Dev mode exposes POST /reset_prefix_cache, so each agent session starts cold.
    with server_process(command, port, "vllm_serve", {"VLLM_SERVER_DEV_MODE": "1"}, ready_path="/health") as base:
        yield base


def measure_agent(base_url: str, args, reset) -> list[dict]:
    """The agent trace `repeat` times, each from a cold prefix cache (`reset`); per turn the fastest TTFT."""
    agent_session(base_url, 2, 4)  # warm-up: a different, short trace
    runs = []
    for _ in range(args.repeat):
        reset()
        runs.append(agent_session(base_url, args.turns, args.tool_lines))
    return [min(per_turn, key=lambda t: t["ttft_s"]) for per_turn in zip(*runs)]


def measure_load(base_url: str, args) -> dict:
    load(base_url, 2, 1, 4)  # warm-up
    return load(base_url, args.clients, args.requests, args.max_tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-python", required=True)
    parser.add_argument("--turns", type=int, default=14)
    parser.add_argument("--tool-lines", type=int, default=9)
    parser.add_argument("--repeat", type=int, default=2, help="agent sessions per server; per turn the fastest TTFT is kept")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=4, help="requests per client")
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()
    directory = tiny_model_dir(TinyConfig(**AGENT_TINY))
    record = {"benchmark": "vs_vllm_serve", "model": "tiny-32k, 16k context, float32", "machine": machine(), "servers": {}}

    engine = load_hf_directory(directory, name="tiny-32k-16k", options=EngineOptions(), source="built offline", is_test=True)
    with BackgroundServer(engine, "agent") as server:
        turns = measure_agent(server.base_url, args, engine.reset_cache)
    engine.reset_cache()
    with BackgroundServer(engine, "load") as server:
        record["servers"]["aisql"] = {"agent_turns": turns, "load": measure_load(server.base_url, args)}
    del engine
    with vllm_server(args.vllm_python, directory, AGENT_TINY["max_position_embeddings"]) as base:

        def reset() -> None:
            urllib.request.urlopen(urllib.request.Request(f"{base}/reset_prefix_cache", method="POST"), timeout=30)

        turns = measure_agent(base, args, reset)
        reset()
        record["servers"]["vllm"] = {"agent_turns": turns, "load": measure_load(base, args)}

    ours, theirs = record["servers"]["aisql"], record["servers"]["vllm"]
    last_a, last_v = ours["agent_turns"][-1], theirs["agent_turns"][-1]
    record["summary"] = {
        "last_turn_context_tokens": last_a["prompt_tokens"],
        "last_turn_ttft_ms": {"aisql": round(1000 * last_a["ttft_s"], 1), "vllm": round(1000 * last_v["ttft_s"], 1)},
        "last_turn_cached_tokens": {"aisql": last_a["cached_tokens"], "vllm": last_v["cached_tokens"]},
        "load": {
            name: {k: server["load"][k] for k in ("errors", "tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms")}
            for name, server in record["servers"].items()
        },
    }
    print(f"{'turn':>4} {'context':>8} {'aisql new':>9} {'vLLM new':>8} {'aisql TTFT':>11} {'vLLM TTFT':>10}")
    for a, v in zip(ours["agent_turns"], theirs["agent_turns"]):
        print(
            f"{a['turn']:>4} {a['prompt_tokens']:>8} {a['new_tokens']:>9} {v['new_tokens']:>8} "
            f"{a['ttft_s'] * 1000:>9.1f}ms {v['ttft_s'] * 1000:>8.1f}ms"
        )
    print(record["summary"])
    print(f"-> {write('vs_vllm_serve', record)}")


if __name__ == "__main__":
    main()
