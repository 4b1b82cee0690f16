"""aisql through llama.cpp's server (`openai:NAME@URL`) against aisql's own engine: the same AI.IF
filter over SemBench movie reviews, the same GGUF weights, answers compared row by row.

llama.cpp runs the GGUF file with its own quantized kernels (Q4_1 for SmolLM2, Q4_K_M for Qwen);
aisql's embedded engine runs the same weights dequantized. The remote backend sends llama.cpp's
server the prompt aisql builds (token ids decoded to text: llama-cpp-python's server reads text)
and reads the label logprobs from the top-20 logprobs of the answer's position (the server
ignores `allowed_token_ids`; aisql.engine.backends.remote). Agreement is the share of reviews both
keep or both drop; every disagreement is listed with its review.

Fairness: both sides see the same prompt text, framing and labels; llama.cpp computes in its
quantized numerics, aisql in its default numerics over the dequantized weights — the
disagreements are the price of those numerics, not of the protocol (the aisql serve test shows
the protocol itself returns identical rows).

    python -m venv /tmp/llama && /tmp/llama/bin/pip install 'llama-cpp-python[server]'   # a peer, never a dependency
    python benchmarks/vs_llamacpp_server.py --server-python /tmp/llama/bin/python --model smollm2 --reviews 200
    python benchmarks/vs_llamacpp_server.py --server-python /tmp/llama/bin/python --model qwen-0.5b --reviews 200
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from vs_llamacpp import gguf_of, reviews  # noqa: E402

QUERY = "SELECT id, AI.IF(PROMPT('Is this movie review positive? Review: {0}', t)) AS kept FROM reviews ORDER BY id"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(python: str, gguf: Path, alias: str, port: int, threads: int, log: Path) -> subprocess.Popen:
    # its log to a file: llama.cpp writes a lot, and a full pipe would stall it
    process = subprocess.Popen(
        [python, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", alias, "--port", str(port), "--n_ctx", "4096", "--n_threads", str(threads)],
        stdout=subprocess.DEVNULL, stderr=log.open("w"), text=True,
    )
    deadline = time.monotonic() + 300
    while True:
        if process.poll() is not None:
            raise SystemExit(f"llama.cpp's server exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as response:
                if response.status == 200:
                    return process
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit("llama.cpp's server did not come up in 300 s")
            time.sleep(0.5)


def run(model: str, texts: list[str]):
    import pyarrow as pa

    import aisql

    con = aisql.connect(model=model, cache=False)
    con.register("reviews", pa.table({"id": list(range(len(texts))), "t": texts}))
    started = time.perf_counter()
    result = con.run(QUERY)
    return {row["id"]: row["kept"] for row in result.table.to_pylist()}, time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-python", required=True, help="a Python with llama-cpp-python[server] installed")
    parser.add_argument("--model", default="smollm2", help="smollm2, qwen-0.5b or qwen-1.5b")
    parser.add_argument("--reviews", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp's threads")
    args = parser.parse_args()

    from common import machine, write

    gguf = gguf_of(args.model)
    texts = reviews(args.reviews)
    local, local_s, local_result = run(str(gguf), texts)
    port = free_port()
    import tempfile

    log = Path(tempfile.gettempdir()) / f"llamacpp_server_{port}.log"
    server = start_server(args.server_python, gguf, str(gguf), port, args.threads, log)  # served under its path: the name resolves here for the tokenizer
    try:
        remote, remote_s, remote_result = run(f"openai:{gguf}@http://127.0.0.1:{port}/v1", texts)
    finally:
        server.terminate()
        server.wait(timeout=60)
    differ = [i for i in local if local[i] != remote.get(i)]
    record = {
        "model": args.model,
        "gguf": gguf.name,
        "reviews": len(texts),
        "agreement": 1 - len(differ) / len(texts),
        "kept_local": sum(bool(v) for v in local.values()),
        "kept_llamacpp": sum(bool(v) for v in remote.values()),
        "local_numerics": local_result.model.numerics,
        "local_wall_s": round(local_s, 1),
        "llamacpp_wall_s": round(remote_s, 1),
        "llamacpp_threads": args.threads,
        "disagreements": [{"id": i, "aisql": local[i], "llamacpp": remote.get(i), "review": texts[i][:160]} for i in differ],
        "machine": machine(),
    }
    path = write(f"vs_llamacpp_server_{args.model}", record)
    print(f"{args.model}: agreement {record['agreement']:.3f} on {len(texts)} reviews ({len(differ)} differ); kept {record['kept_local']} (aisql) vs {record['kept_llamacpp']} (llama.cpp) -> {path}")


if __name__ == "__main__":
    main()
