"""Hardware profiles for the roofline: peak FLOPs, memory bandwidth, price.

GPU figures are the vendors' dense bf16 peaks and HBM bandwidths; a forward pass reaches only a
fraction of peak (`efficiency`). The CPU profile is measured on this machine — a float32 matmul and
a large copy, about a second, cached under the aisql cache dir. Prices are on-demand list prices
of late 2026 and only a default: `--price-per-hour` overrides them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

from aisql.errors import AisqlError


@dataclass(frozen=True)
class Hardware:
    name: str
    peak_flops: float  # per second, in the model's compute dtype
    memory_bandwidth: float  # bytes per second
    efficiency: float  # fraction of peak FLOPs a forward pass reaches
    price_per_hour: float  # USD
    measured: bool = False
    # What the engine achieved with this model in earlier runs (computed tokens per second of
    # AI-node time; aisql.executor.estimates.throughput): when known, time estimates use it, not the FLOPs.
    planned_tokens_per_s: float | None = None  # prefill: the scoring rate where measured apart
    naive_tokens_per_s: float | None = None
    decode_pass_s: float | None = None  # seconds per decode pass (a batch of answers stepped by one token)
    speed_source: str | None = None  # whose measurement the rates are ("measured with this model", "scaled from ...")

    def with_price(self, price_per_hour: float | None) -> "Hardware":
        if price_per_hour is not None and not (isinstance(price_per_hour, (int, float)) and math.isfinite(price_per_hour) and price_per_hour >= 0):
            # nan compares false with every limit (a --max-cost run ran unlimited); inf made
            # every estimate infinite only after prompts had run
            raise AisqlError(f"price_per_hour must be a finite number, 0 or more, got {price_per_hour!r}")
        return self if price_per_hour is None else replace(self, price_per_hour=price_per_hour)


GPUS = {
    "h100": Hardware("h100", peak_flops=989e12, memory_bandwidth=3.35e12, efficiency=0.45, price_per_hour=2.50),
    "h200": Hardware("h200", peak_flops=989e12, memory_bandwidth=4.8e12, efficiency=0.45, price_per_hour=3.50),
}
CPU_PRICE_PER_HOUR = 0.10  # a 2-core cloud VM
HARDWARE = ("cpu", *GPUS)  # the profiles' names, as every door spells them


def hardware_profile(name: str, price_per_hour: float | None = None, cpu: Callable[[], tuple[float, float]] | None = None) -> Hardware:
    """A named profile. `cpu` measures this machine (FLOP/s, bytes/s) for the `cpu` profile: the
    planner never measures anything itself."""
    name = name.lower()
    if name in GPUS:
        return GPUS[name].with_price(price_per_hour)
    if name == "cpu" and cpu is not None:
        flops, bandwidth = cpu()
        profile = Hardware("cpu", peak_flops=flops, memory_bandwidth=bandwidth, efficiency=0.6, price_per_hour=CPU_PRICE_PER_HOUR, measured=True)
        return profile.with_price(price_per_hour)
    raise AisqlError(f"unknown hardware profile {name!r}", hint=f"use {', '.join(HARDWARE)}")
