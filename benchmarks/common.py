"""Shared helpers for the engine benchmarks: models built offline, machine facts, JSON results."""

from __future__ import annotations

import json
import os
import platform
from contextlib import contextmanager
from pathlib import Path

import torch

RESULTS = Path(__file__).resolve().parent / "results"

# The "tiny model with a 32k vocabulary" of the benchmarks (~25M parameters): small enough for a
# 2-core CPU, wide enough that — as in real models — a token's compute outweighs moving its KV
# (a hidden-256 model spends about as long copying cached prefixes as computing tails).
BENCH_TINY = dict(
    hidden_size=512,
    intermediate_size=1536,
    num_hidden_layers=8,
    num_attention_heads=8,
    num_key_value_heads=2,
    max_position_embeddings=4096,
    initializer_range=0.1,  # answers vary (0.02: all alike) and numerics stay sane (0.5: logits explode)
    model_vocab_size=32000,
)


def bench_engine(**options):
    from aisql.engine import EngineOptions
    from aisql.engine.model.loader import load_hf_directory
    from aisql.engine.model.tiny import TinyConfig, tiny_model_dir

    directory = tiny_model_dir(TinyConfig(**BENCH_TINY))
    return load_hf_directory(directory, name="tiny-32k", options=EngineOptions(**options), source="built offline", is_test=True)


# The smaller model the first measurements used, for comparison (`run.py --model tiny-32k-small`).
BENCH_TINY_SMALL = dict(BENCH_TINY, hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_key_value_heads=4)


def bench_engine_small(**options):
    from aisql.engine import EngineOptions
    from aisql.engine.model.loader import load_hf_directory
    from aisql.engine.model.tiny import TinyConfig, tiny_model_dir

    directory = tiny_model_dir(TinyConfig(**BENCH_TINY_SMALL))
    return load_hf_directory(directory, name="tiny-32k-small", options=EngineOptions(**options), source="built offline", is_test=True)


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def write(name: str, record: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


def call_in_subprocess(module: str, call: str) -> dict:
    """`call` (a Python expression over `module`'s names, returning JSON-able data) run in a fresh
    interpreter: one benchmark configuration per process, so thread pools, dtypes and caches of
    one never leak into the next."""
    import subprocess
    import sys

    root = str(Path(__file__).resolve().parent.parent)
    code = f"import json, sys; sys.path.insert(0, {root!r}); from {module} import *; print('RESULT ' + json.dumps({call}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"{call} failed:\n{done.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])


def model_argument(name: str) -> str:
    """What `aisql.connect(model=...)` takes for a benchmark's `--model`: a reference model's short
    name (qwen-0.5b, qwen-1.5b: its verified GGUF, fetched once by reference_models.py), else the
    name as given (smollm2, tiny, a path, a Hub id)."""
    from reference_models import REFERENCE_MODELS, fetch

    if name in REFERENCE_MODELS:
        return str(fetch(name))
    return name


@contextmanager
def server_process(command: list[str], port: int, log_name: str, env: dict | None = None, ready_path: str = "/v1/models", cwd: str | None = None):
    """A server subprocess (its output in results/<log_name>.log), yielded once GET `ready_path`
    answers; stopped on exit. `cwd`: a source tree whose `aisql` `python -m aisql` then runs."""
    import subprocess
    import time
    import urllib.request

    log = open(RESULTS / f"{log_name}.log", "w")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, **(env or {})), cwd=cwd)
    started = time.perf_counter()
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{command[0]} exited ({process.returncode}); see results/{log_name}.log")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}{ready_path}", timeout=2)
                break
            except OSError:
                time.sleep(1)
        print(f"{log_name} up in {time.perf_counter() - started:.0f} s", flush=True)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def run_together(threads: list) -> float:
    """Start every thread, wait for all: the wall seconds they took together."""
    import time

    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started
