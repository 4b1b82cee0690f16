"""Hostile clients against `aisql serve` while normal clients use it: the serving edge under a
mix of idle connections, slow headers, oversized bodies, bad seeds and malformed JSON.

    python benchmarks/hostile_clients.py [--seconds 60] [--idle 200] [--max-connections 64]
    python benchmarks/hostile_clients.py --slowloris 100 --idle 0 --read-timeout 5 --out hostile_slowloris.json

Normal clients send ordinary completions (retrying a refused connection, as HTTP clients do) and
must all be answered — no hang, no 5xx. Reports their success rate and latency percentiles, what
the hostile side sent, and the server process's RSS (idle, peak). Results: results/hostile_clients.json.
The test suite runs the same mix for a few seconds (tests/test_server_hardening.py).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

MODEL = "tiny"


@dataclass
class MixReport:
    normal_ok: int = 0
    normal_failed: int = 0
    normal_resets: int = 0  # attempts refused or reset (each retried, as HTTP clients do)
    normal_5xx: int = 0
    latencies: list[float] = field(default_factory=list)
    hostile: dict[str, int] = field(default_factory=dict)
    hostile_statuses: dict[str, int] = field(default_factory=dict)

    def count(self, kind: str, status: int | str) -> None:
        self.hostile[kind] = self.hostile.get(kind, 0) + 1
        key = f"{kind}:{status}"
        self.hostile_statuses[key] = self.hostile_statuses.get(key, 0) + 1

    def summary(self) -> dict:
        lat = sorted(self.latencies)
        pick = lambda q: round(lat[min(len(lat) - 1, int(q * len(lat)))], 3) if lat else None  # noqa: E731
        total = self.normal_ok + self.normal_failed
        return {
            "normal_requests": total,
            "normal_success_rate": round(self.normal_ok / total, 4) if total else None,
            "normal_5xx": self.normal_5xx,
            "normal_attempts_reset": self.normal_resets,
            "normal_latency_p50_s": pick(0.5),
            "normal_latency_p99_s": pick(0.99),
            "hostile_sent": self.hostile,
            "hostile_outcomes": self.hostile_statuses,
        }


def _post(base_url: str, body: bytes, headers: dict, timeout: float = 60) -> int:
    request = urllib.request.Request(base_url + "/v1/completions", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


def _normal_client(base_url: str, stop: threading.Event, report: MixReport, lock: threading.Lock) -> None:
    rng = random.Random(threading.get_ident())
    while not stop.is_set():
        body = json.dumps({"model": MODEL, "prompt": f"Question {rng.randint(0, 999)}: hello?", "max_tokens": 4, "temperature": 0}).encode()
        started = time.perf_counter()
        status: int | None = None
        for _attempt in range(50):  # a refused or reset connection is retried, as clients do
            try:
                status = _post(base_url, body, {"Content-Type": "application/json"})
                break
            except (ConnectionError, urllib.error.URLError, socket.timeout, OSError):
                with lock:
                    report.normal_resets += 1
                time.sleep(0.05)
        with lock:
            if status == 200:
                report.normal_ok += 1
                report.latencies.append(time.perf_counter() - started)
            else:
                report.normal_failed += 1
                report.normal_5xx += int(status is not None and status >= 500)


def _hostile(base_url: str, host: str, port: int, stop: threading.Event, report: MixReport, lock: threading.Lock, idle: int) -> None:
    rng = random.Random(7)
    held: list[socket.socket] = []
    kinds = ["idle", "slow_headers", "oversized", "bad_seed", "malformed", "nested", "text_plain"]
    while not stop.is_set():
        kind = rng.choice(kinds if idle else [k for k in kinds if k not in ("idle", "slow_headers")])
        status: int | str = "sent"
        try:
            if kind in ("idle", "slow_headers"):
                if len(held) >= idle:
                    held.pop(0).close()
                sock = socket.create_connection((host, port), timeout=5)
                if kind == "slow_headers":
                    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-")
                held.append(sock)
            elif kind == "oversized":
                status = _post(base_url, b'{"model": "tiny", "prompt": "' + b"x" * (8 << 20) + b'"}', {"Content-Type": "application/json"})
            elif kind == "bad_seed":
                status = _post(base_url, json.dumps({"model": MODEL, "prompt": "x", "seed": 2**80}).encode(), {"Content-Type": "application/json"})
            elif kind == "malformed":
                status = _post(base_url, b'{"model": "tiny", "prompt": "\\ud800', {"Content-Type": "application/json"})
            elif kind == "nested":
                status = _post(base_url, b'{"model": "tiny", "prompt": ' + b"[" * 50000 + b"]" * 50000 + b"}", {"Content-Type": "application/json"})
            else:
                status = _post(base_url, b'{"model": "tiny", "prompt": "x"}', {"Content-Type": "text/plain"})
        except (ConnectionError, urllib.error.URLError, socket.timeout, OSError) as err:
            status = type(err).__name__
        with lock:
            report.count(kind, status)
        time.sleep(0.002)
    for sock in held:
        sock.close()


def _slowloris(host: str, port: int, stop: threading.Event, report: MixReport, lock: threading.Lock, sockets: int, drip_s: float) -> None:
    """`sockets` connections that each send a request one header byte every `drip_s` seconds
    (never finishing), reopened when the server closes them: they hold connection slots."""
    header = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 10_000
    held: dict[socket.socket, int] = {}
    while not stop.is_set():
        while len(held) < sockets and not stop.is_set():
            try:
                held[socket.create_connection((host, port), timeout=5)] = 0
                with lock:
                    report.count("slowloris", "opened")
            except OSError as err:
                with lock:
                    report.count("slowloris", type(err).__name__)
                break
        for sock in list(held):
            try:
                sock.sendall(header[held[sock] : held[sock] + 1])
                held[sock] += 1
            except OSError:
                sock.close()
                del held[sock]
                with lock:
                    report.count("slowloris", "closed_by_server")
        stop.wait(drip_s)
    for sock in held:
        sock.close()


def run_mix(base_url: str, seconds: float, *, idle: int = 200, normal_clients: int = 4, slowloris: int = 0, drip_s: float = 1.0) -> MixReport:
    """Hostile traffic and normal clients together for `seconds`; stops by itself. `slowloris`:
    that many dripping connections beside the rest."""
    host, port = base_url.removeprefix("http://").rsplit(":", 1)
    report, lock, stop = MixReport(), threading.Lock(), threading.Event()
    threads = [threading.Thread(target=_hostile, args=(base_url, host, int(port), stop, report, lock, idle), daemon=True)]
    if slowloris:
        threads.append(threading.Thread(target=_slowloris, args=(host, int(port), stop, report, lock, slowloris, drip_s), daemon=True))
    threads += [threading.Thread(target=_normal_client, args=(base_url, stop, report, lock), daemon=True) for _ in range(normal_clients)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(120)
    return report


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    import subprocess
    import sys

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--idle", type=int, default=200)
    parser.add_argument("--max-connections", type=int, default=64)
    parser.add_argument("--read-timeout", type=float, default=2.0)
    parser.add_argument("--slowloris", type=int, default=0, help="dripping connections (one header byte a second) beside the mix")
    parser.add_argument("--out", default="hostile_clients.json", help="file name under results/")
    args = parser.parse_args()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "aisql.cli", "serve", "--model", "tiny", "--port", str(port), "--max-connections", str(args.max_connections), "--read-timeout", str(args.read_timeout)],
        stderr=subprocess.PIPE,
        text=True,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(base_url + "/health", timeout=2).read()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
        idle_rss = _rss_mb(server.pid)
        peak = [idle_rss]
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], _rss_mb(server.pid))
                time.sleep(0.2)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        report = run_mix(base_url, args.seconds, idle=args.idle, slowloris=args.slowloris)
        stop.set()
        sampler.join()
        still_up = urllib.request.urlopen(base_url + "/health", timeout=10).status == 200
    finally:
        server.terminate()
        server.communicate(timeout=30)
    result = {
        "seconds": args.seconds,
        "idle_connections": args.idle,
        "max_connections": args.max_connections,
        "read_timeout_s": args.read_timeout,
        "slowloris_connections": args.slowloris,
        "server_rss_idle_mb": round(idle_rss, 1),
        "server_rss_peak_mb": round(peak[0], 1),
        "server_up_after": still_up,
        **report.summary(),
    }
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", args.out)
    with open(out, "w") as f:
        f.write(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
