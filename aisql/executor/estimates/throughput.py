"""What the engine really achieves, remembered per model: computed tokens per second of AI-node
time in planned and naive runs, and how long the model took to load — so `explain` and the
`--max-cost` check price a query from measured speed instead of a matmul peak.

Kept as a small JSON file beside the result cache, keyed by the model's fingerprint (weights,
quantization, device, dtype) and aisql's version; runs too small to say anything (< 500 computed
tokens) are not recorded. Explain reads it without torch or the model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aisql.planner.hardware import Hardware

MIN_TOKENS = 500


@dataclass(frozen=True)
class Measured:
    planned_tokens_per_s: float | None
    naive_tokens_per_s: float | None
    load_s: float | None
    runs: int
    load: float | None = None  # cores other work kept busy while the speed was measured (about)


def log_path() -> Path:
    from aisql.paths import cache_root

    return cache_root() / "throughput.json"


def _key(fingerprint: str) -> str:
    from aisql.version import __version__

    return f"{fingerprint}|{__version__}"


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def lookup(fingerprint: str, path: Path | None = None) -> Measured | None:
    entry = _read(path or log_path()).get(_key(fingerprint))
    if not entry:
        return None

    def rate(mode: str) -> float | None:
        tokens, seconds = entry.get(f"{mode}_tokens", 0), entry.get(f"{mode}_seconds", 0.0)
        return tokens / seconds if tokens >= MIN_TOKENS and seconds > 0 else None

    return Measured(rate("planned"), rate("naive"), entry.get("load_s"), entry.get("runs", 0), entry.get("busy_elsewhere"))


def record(
    fingerprint: str,
    mode: str,
    tokens: int,
    seconds: float,
    load_s: float | None = None,
    path: Path | None = None,
    busy_elsewhere: float | None = None,
    weight_bytes: int | None = None,
) -> None:
    """Add one run's AI work (`mode` planned or naive) to the model's totals (best effort: a
    read-only cache directory only means explain stays uncalibrated)."""
    if tokens < MIN_TOKENS or seconds <= 0:
        return
    path = path or log_path()
    data = _read(path)
    entry = data.setdefault(_key(fingerprint), {})
    # Recent runs count most: older totals decay, so a faster engine or machine shows soon.
    for field in (f"{mode}_tokens", f"{mode}_seconds"):
        entry[field] = entry.get(field, 0) * 0.5
    entry[f"{mode}_tokens"] += tokens
    entry[f"{mode}_seconds"] += seconds
    entry["runs"] = entry.get("runs", 0) + 1
    if load_s is not None:
        entry["load_s"] = round(load_s, 3)
        if weight_bytes:
            entry["weight_bytes"] = int(weight_bytes)
    if busy_elsewhere is not None:  # decays with the rates it describes
        entry["busy_elsewhere"] = round(0.5 * entry.get("busy_elsewhere", busy_elsewhere) + 0.5 * busy_elsewhere, 2)
    from aisql.paths import save_cache_file

    save_cache_file(path, json.dumps(data, indent=1))


def calibrated(profile: "Hardware", measured: "Measured | None") -> "Hardware":
    """The profile with this model's measured speed from earlier runs, when there is one."""
    if measured is None or measured.planned_tokens_per_s is None:
        return profile
    import dataclasses

    return dataclasses.replace(profile, planned_tokens_per_s=measured.planned_tokens_per_s, naive_tokens_per_s=measured.naive_tokens_per_s)


def measured_here(profile: "Hardware", session) -> "Measured | None":
    """Runs measured this machine: they price its own profile only, never a GPU profile."""
    if profile.name != session.default_hardware():
        return None
    fingerprint = session.known_fingerprint()  # explain never measures the numerics
    return lookup(fingerprint) if fingerprint is not None else None


def remember(session, nodes, mode: str) -> None:
    """A run's speed on this machine (its LLM nodes' computed tokens over their time), and its
    load time with the model's weight bytes (for other models' load estimates)."""
    tokens = sum(n.computed_tokens for n in nodes)
    seconds = sum(n.wall_s for n in nodes)
    weight_bytes = None
    if session.load_s is not None:
        try:
            weight_bytes = session.facts().profile.weight_bytes
        except Exception:  # a model without a profile: its load is still kept, unscaled
            weight_bytes = None
    record(session.fingerprint(), mode, tokens, seconds, load_s=session.load_s, busy_elsewhere=busy_elsewhere(), weight_bytes=weight_bytes)


def estimated_load(weight_bytes: int, path: Path | None = None) -> tuple[float, int] | None:
    """(seconds, loads it rests on) to load a model of `weight_bytes` never loaded here, from the
    loads of other models measured on this machine (local engines only): load ~ a + b * bytes,
    fitted when their sizes differ, else the one size's load scaled by the square root of the
    size ratio (a load is mostly fixed cost — imports, kernel choice — at these sizes). None when
    no model was loaded here yet."""
    from aisql.version import __version__

    points = [
        (float(entry["weight_bytes"]), float(entry["load_s"]))
        for key, entry in _read(path or log_path()).items()
        if key.endswith(f"|{__version__}") and not key.startswith(("openai:", "vllm:")) and entry.get("load_s") and entry.get("weight_bytes")
    ]
    if not points:
        return None
    sizes = {size for size, _ in points}
    if len(sizes) >= 2:
        n = len(points)
        mean_x, mean_y = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
        slope = max(0.0, sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x, _ in points))
        intercept = max(0.0, mean_y - slope * mean_x)
        return intercept + slope * weight_bytes, n
    size, seconds = points[0][0], sum(y for _, y in points) / len(points)
    return seconds * (weight_bytes / size) ** 0.5, len(points)


def busy_elsewhere() -> float | None:
    """About how many cores other work kept busy during the run just ended: the 1-minute load
    average less this process's own compute threads (no extra sampling at the end of a run)."""
    import os
    import sys

    try:
        load = os.getloadavg()[0]
    except OSError:
        return None
    torch = sys.modules.get("torch")
    own = torch.get_num_threads() if torch is not None else 1
    return max(0.0, load - own)
