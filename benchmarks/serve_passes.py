"""Agents through `aisql serve`, this tree against another (the starting commit), rounds
alternating: did one pass for prefill and decode lower the time per output token without
queueing new turns? (issue 61)

    git worktree add /tmp/base <commit>
    python benchmarks/serve_passes.py --baseline /tmp/base [--model smollm2] [--sessions 1,4,16]
        [--rounds 2] [--pass-tokens 128] [--turns 8] [--profile 16]

Each measurement starts a fresh server whose `aisql` is that tree's (run from the tree: `python -m
aisql serve`, the machine's cores, float32, the model's own weights), warms it with one short session,
then runs benchmarks/agent_servers.py's trace (each session a conversation: system prompt, a task
with tool output, turns appending the reply and the next tool output; greedy, streaming, 32
tokens per reply) at each session count. Order per round: baseline, this tree, baseline, ...
Per session count: TTFT p50/p90, TPOT p50/p90 (per request: the time from its first to its last
token over its tokens after the first), completion tokens per second; the medians over rounds
and this tree's over the baseline's. `--pass-tokens` is given to this tree only (the baseline has
no such option). `--profile N`: after the rounds, one more run of this tree at N sessions under
py-spy (when installed), its top frames by share of the engine thread. Results:
results/serve_passes_<model>.json.
"""

from __future__ import annotations

import argparse
import re
import signal
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from agent_servers import free_port, run  # noqa: E402
from common import machine, model_argument, server_process, write  # noqa: E402

METRICS = ("ttft_p50_ms", "ttft_p90_ms", "tpot_p50_ms", "tpot_p90_ms", "completion_tokens_per_s")


def serve_command(tree: Path, spec: str, port: int, threads: int, extra: list[str]) -> tuple[list[str], dict]:
    command = [sys.executable, "-m", "aisql", "serve", "--model", spec, "--port", str(port), "--threads", str(threads),
               "--served-model-name", "agent", "--dtype", "float32", *extra]
    return command, {"PYTHONPATH": str(tree)}


def measure(tree: Path, label: str, spec: str, sessions: list[int], args, extra: list[str]) -> dict:
    port = free_port()
    command, env = serve_command(tree, spec, port, args.threads, extra)
    with server_process(command, port, f"serve_passes_{label}", env, cwd=str(tree)) as base:
        run(base, 1, argparse.Namespace(**{**vars(args), "turns": 2}))  # warm-up: one short session
        return {str(n): run(base, n, args) for n in sessions}


def summary(rounds: list[dict], sessions: list[int]) -> dict:
    out = {}
    for n in sessions:
        rows = [r[str(n)] for r in rounds]
        out[str(n)] = {m: statistics.median(r[m] for r in rows) for m in METRICS if all(r.get(m) is not None for r in rows)}
        out[str(n)]["errors"] = sum(len(r["errors"]) for r in rows)
    return out


def profile(tree: Path, spec: str, sessions: int, args, extra: list[str]) -> dict:
    """One run at `sessions` under py-spy (raw samples of every thread), the engine thread's
    samples folded by their innermost aisql / torch frame."""
    spy_path = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy_path).exists():
        return {"skipped": "py-spy is not installed"}
    port = free_port()
    command, env = serve_command(tree, spec, port, args.threads, extra)
    folded = Path(tempfile.mkdtemp()) / "serve.folded"
    with server_process(command, port, "serve_passes_profile", env, cwd=str(tree)) as base:
        run(base, 1, argparse.Namespace(**{**vars(args), "turns": 2}))
        pid = _server_pid(port)
        spy = subprocess.Popen([spy_path, "record", "--pid", str(pid), "--rate", "50", "--format", "raw", "--output", str(folded), "--threads"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        result = run(base, sessions, args)
        spy.send_signal(signal.SIGINT)  # py-spy writes its samples on SIGINT (SIGTERM left none)
        spy.wait(timeout=120)
    return {"run": {k: v for k, v in result.items() if k != "per_turn"}, "engine_thread": _fold(folded)}


def _server_pid(port: int) -> int:
    out = subprocess.run(["lsof", "-t", f"-iTCP:{port}", "-sTCP:LISTEN"], capture_output=True, text=True).stdout.split()
    return int(out[0])


# Where a sample's time goes, by the first matching frame from the innermost out.
BUCKETS = (
    ("KV writes into a request's buffers", "write (aisql/engine/continuous/sequence_kv.py"),
    ("prefix copy at a prompt's start", "seed (aisql/engine/continuous/sequence_kv.py"),
    ("attention: prompt chunks and drafts (two parts)", "_in_two_parts ("),
    ("attention: one-token decode rows", "attend (aisql/engine/continuous/mixed_pass.py"),
    ("output head (logits)", "logits (aisql/engine/batch/model_runner.py"),
    ("shared prefixes of prompts starting together", "share_prefixes ("),
    ("prefix-tree store (clone of a finished turn)", "store_sequence ("),
    ("the model's other layers", "run_mixed ("),
    ("scheduling, delivery, Python", "continuous/loop.py"),
)


# transformers' Llama classes by their source lines (transformers 5.x modeling_llama.py): the
# innermost of its frames says which part of the layer a sample is in.
LLAMA_PARTS = ((53, 75, "norms"), (76, 151, "rotary"), (152, 205, "MLP"), (206, 273, "q/k/v/o projections, rotary applied"))


def _model_part(frames: list[str]) -> str | None:
    for frame in reversed(frames):
        match = re.search(r"modeling_llama\.py:(\d+)", frame)
        if match:
            line = int(match.group(1))
            return next((name for low, high, name in LLAMA_PARTS if low <= line <= high), None)
    return None


def _fold(path: Path) -> dict:
    if not path.exists():
        return {}
    counts: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if "_loop (" not in stack or "continuous/loop.py" not in stack:
            continue  # not the engine thread
        total += int(count)
        frames = stack.split(";")
        bucket = "other"
        for name, needle in BUCKETS:
            if any(needle in f for f in frames):
                bucket = name
                break
        if bucket == "the model's other layers":
            bucket = _model_part(frames) or bucket
        counts[bucket] = counts.get(bucket, 0) + int(count)
    return {"samples": total, "share": {k: round(v / total, 3) for k, v in sorted(counts.items(), key=lambda kv: -kv[1])}} if total else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, type=Path, help="a worktree of the starting commit")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--sessions", default="1,4,16")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--pass-tokens", type=int, default=None)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--tool-lines", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--profile", type=int, default=0, metavar="N")
    parser.add_argument("--tag", default="", help="suffix of the results file")
    args = parser.parse_args()
    spec = model_argument(args.model)
    sessions = [int(n) for n in args.sessions.split(",")]
    extra = ["--pass-tokens", str(args.pass_tokens)] if args.pass_tokens else []
    record = {"benchmark": "serve_passes", "model": args.model, "machine": machine(), "baseline": str(args.baseline),
              "pass_tokens": args.pass_tokens, "turns": args.turns, "max_tokens": args.max_tokens, "rounds": {"baseline": [], "head": []}}
    name = f"serve_passes_{args.model}{args.tag}"
    for index in range(args.rounds):
        for side, tree, flags in (("baseline", args.baseline, []), ("head", ROOT, extra)):
            result = measure(tree, side, spec, sessions, args, flags)
            record["rounds"][side].append(result)
            print(f"round {index + 1} {side}:", {n: {m: r.get(m) for m in METRICS} for n, r in result.items()}, flush=True)
            write(name, record)
    record["median"] = {side: summary(record["rounds"][side], sessions) for side in ("baseline", "head")}
    record["head_over_baseline"] = {
        str(n): {m: round(record["median"]["head"][str(n)][m] / record["median"]["baseline"][str(n)][m], 3)
                 for m in METRICS if m in record["median"]["head"][str(n)] and m in record["median"]["baseline"][str(n)]}
        for n in sessions
    }
    print("head / baseline:", record["head_over_baseline"], flush=True)
    if args.profile:
        record["profile"] = profile(ROOT, spec, args.profile, args, extra)
        print("profile:", record["profile"], flush=True)
    write(name, record)


if __name__ == "__main__":
    main()
