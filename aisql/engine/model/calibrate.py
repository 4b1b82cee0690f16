"""This machine's CPU throughput for the cost model: a float32 matmul and a large copy, measured
once (about a second, with torch) and kept in aisql's cache dir; later reads need no torch."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from pathlib import Path

from aisql.paths import cache_root, save_cache_file


def cpu_calibration() -> tuple[float, float]:
    """(float32 FLOP/s of a 1024² matmul, copy bandwidth in bytes/s) on this machine."""
    path = _calibration_path()
    try:
        data = json.loads(path.read_text())
        return float(data["peak_flops"]), float(data["memory_bandwidth"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    flops, bandwidth = _measure()
    save_cache_file(path, json.dumps({"peak_flops": flops, "memory_bandwidth": bandwidth}))
    return flops, bandwidth


def _calibration_path() -> Path:
    """One file per kind of machine: core count, architecture and processor model."""
    processor = platform.processor() or _cpu_model()
    key = hashlib.sha256(f"{os.cpu_count()}|{platform.machine()}|{processor}".encode()).hexdigest()[:16]
    return cache_root() / "hardware" / f"cpu-{key}.json"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def _measure() -> tuple[float, float]:
    import torch

    size = 1024
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    runs, started = 0, time.perf_counter()
    while time.perf_counter() - started < 0.4:
        torch.mm(a, b)
        runs += 1
    flops = 2 * size**3 * runs / (time.perf_counter() - started)
    block = torch.empty(64 << 20, dtype=torch.uint8)
    target = torch.empty_like(block)
    target.copy_(block)
    copies, started = 0, time.perf_counter()
    while time.perf_counter() - started < 0.3:
        target.copy_(block)
        copies += 1
    bandwidth = 2 * block.numel() * copies / (time.perf_counter() - started)  # read + write
    return flops, bandwidth
