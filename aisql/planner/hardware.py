"""Hardware profiles for the roofline: peak FLOPs, memory bandwidth, price.

GPU figures are the vendors' dense bf16 peaks and HBM bandwidths; a forward pass reaches only a
fraction of peak (`efficiency`). The CPU profile is measured on this machine — a float32 matmul and
a large copy, about a second, cached under the aisql cache dir. Prices are on-demand list prices
of late 2026 and only a default: `--price-per-hour` overrides them.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, replace

from aisql.errors import AisqlError
from aisql.paths import cache_root


@dataclass(frozen=True)
class Hardware:
    name: str
    peak_flops: float  # per second, in the model's compute dtype
    memory_bandwidth: float  # bytes per second
    efficiency: float  # fraction of peak FLOPs a forward pass reaches
    price_per_hour: float  # USD
    measured: bool = False

    def with_price(self, price_per_hour: float | None) -> "Hardware":
        return self if price_per_hour is None else replace(self, price_per_hour=price_per_hour)


GPUS = {
    "h100": Hardware("h100", peak_flops=989e12, memory_bandwidth=3.35e12, efficiency=0.45, price_per_hour=2.50),
    "h200": Hardware("h200", peak_flops=989e12, memory_bandwidth=4.8e12, efficiency=0.45, price_per_hour=3.50),
}
CPU_PRICE_PER_HOUR = 0.10  # a 2-core cloud VM


def hardware_profile(name: str, price_per_hour: float | None = None) -> Hardware:
    name = name.lower()
    if name in GPUS:
        return GPUS[name].with_price(price_per_hour)
    if name == "cpu":
        return calibrated_cpu().with_price(price_per_hour)
    raise AisqlError(f"unknown hardware profile {name!r}", hint="use cpu, h100 or h200")


def default_hardware() -> str:
    """The profile a run is costed at when none is named: this machine's kind."""
    import torch

    return "h100" if torch.cuda.is_available() else "cpu"


def calibrated_cpu() -> Hardware:
    """This machine's float32 matmul throughput and copy bandwidth (measured once, then cached)."""
    import torch

    path = cache_root() / "hardware" / f"cpu-{os.cpu_count()}-{torch.get_num_threads()}-{torch.__version__}.json"
    if path.exists():
        try:
            return Hardware(**json.loads(path.read_text()))
        except (ValueError, TypeError):
            pass
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
    profile = Hardware("cpu", peak_flops=flops, memory_bandwidth=bandwidth, efficiency=0.6, price_per_hour=CPU_PRICE_PER_HOUR, measured=True)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(profile)))
    except OSError:
        pass
    return profile
