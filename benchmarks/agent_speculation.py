"""Prompt-lookup speculation on copy-heavy agent turns of a real model (issue 47, build item 3):
draft acceptance and decode tokens/s with and without it, and whether the text is the same.

    python benchmarks/agent_speculation.py --model smollm2 [--turns 12] [--max-tokens 160]
    python benchmarks/agent_speculation.py --model qwen-0.5b

A copy-heavy turn is what coding agents send most: a function from a file (here: functions of
this repository's own source, the same ones in every run), and an edit that leaves most of it
as it was ("rename X to Y, reply with the whole function"). The answer repeats long runs of the
prompt, which is what prompt-lookup drafts guess. `aisql serve`'s engine in this process, one
request at a time, greedy, streaming; once with `speculative=False`, once with the default.
Decode tokens/s = completion tokens / (last chunk - first chunk). Acceptance = accepted / drafted
tokens (the engine's counters). Greedy speculation is exact: the two runs' texts must be equal.
Written to benchmarks/results/agent_speculation_<model>.json.
"""

from __future__ import annotations

import argparse
import ast
import sys
import time
from pathlib import Path

import openai

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import machine, model_argument, write  # noqa: E402

from aisql.engine import EngineOptions  # noqa: E402
from aisql.engine.model.loader import load_engine  # noqa: E402
from aisql.serve.background import BackgroundServer  # noqa: E402

SOURCES = ["aisql/serve/routing.py", "aisql/engine/continuous/scheduler.py", "aisql/serve/text.py", "aisql/engine/continuous/batch.py"]


def copy_tasks(count: int) -> list[str]:
    """Functions of 8-30 lines from this repository, each with a rename to make."""
    tasks = []
    for source in SOURCES:
        text = (HERE.parent / source).read_text()
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef) and 8 <= node.end_lineno - node.lineno + 1 <= 30 and node.args.args:
                body = "\n".join(lines[node.lineno - 1 : node.end_lineno])
                old = node.args.args[-1].arg
                tasks.append(
                    f"Here is a Python function:\n\n```python\n{body}\n```\n\nRename the parameter `{old}` to `{old}_value` "
                    "everywhere in it. Reply with the whole function and nothing else."
                )
    return tasks[:count]


def run_turns(base_url: str, tasks: list[str], max_tokens: int) -> dict:
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=900)
    texts, tokens, decode_s = [], 0, 0.0
    for task in tasks:
        first = last = None
        pieces, count = [], 0
        stream = client.chat.completions.create(
            model="agent", messages=[{"role": "user", "content": task}], max_tokens=max_tokens, temperature=0,
            stream=True, stream_options={"include_usage": True},
        )
        for chunk in stream:
            if chunk.usage is not None:
                count = chunk.usage.completion_tokens
            if chunk.choices and chunk.choices[0].delta.content:
                last = time.perf_counter()
                first = first or last
                pieces.append(chunk.choices[0].delta.content)
        texts.append("".join(pieces))
        tokens += max(0, count - 1)  # tokens after the first chunk's first token
        decode_s += (last or 0) - (first or 0)
    return {"completion_tokens": tokens, "decode_s": round(decode_s, 2), "tokens_per_s": round(tokens / max(decode_s, 1e-9), 2), "_texts": texts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--turns", type=int, default=12)
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    spec = model_argument(args.model)
    tasks = copy_tasks(args.turns)
    record = {"benchmark": "agent_speculation", "model": args.model, "machine": machine(), "turns": len(tasks), "max_tokens": args.max_tokens}
    for mode, speculative in (("greedy", False), ("speculative", True)):
        engine = load_engine(spec, EngineOptions(speculative=speculative, dtype="float32", threads=args.threads))
        with BackgroundServer(engine, "agent") as server:
            run_turns(server.base_url, tasks[:1], 16)  # warm-up
            stats = server.api.serving.stats
            drafted, accepted = stats.draft_tokens, stats.draft_accepted_tokens
            record[mode] = run_turns(server.base_url, tasks, args.max_tokens)
            drafted, accepted = stats.draft_tokens - drafted, stats.draft_accepted_tokens - accepted
            record[mode] |= {"draft_tokens": drafted, "accepted_tokens": accepted, "acceptance": round(accepted / drafted, 3) if drafted else None}
        del engine
        print(mode, {k: v for k, v in record[mode].items() if k != "_texts"}, flush=True)
    record["same_text"] = record["greedy"].pop("_texts") == record["speculative"].pop("_texts")
    record["speedup"] = round(record["speculative"]["tokens_per_s"] / record["greedy"]["tokens_per_s"], 2)
    print(f"speedup {record['speedup']}x, same text {record['same_text']}")
    print(f"-> {write(f'agent_speculation_{args.model}', record)}")


if __name__ == "__main__":
    main()
