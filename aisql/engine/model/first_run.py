"""What a model's first run on this machine costs before its first answer, so `explain` can say
it: a GGUF file's conversion (once per file) and, on a CPU that computes bfloat16 natively, the
number-format trial (once per model and CPU kind). The model load is priced by
aisql.executor.estimates.throughput, from loads measured here.

Conversions are timed as they happen and kept in a small JSON file of the cache
(`conversions.json`: the float32 weights written, in bytes, and seconds). A file never converted
here is priced by the weights it will write (the model's shape, read from the GGUF without
converting it): a line through the conversions measured here where their sizes differ, else the
one size scaled by the square root of the size ratio (a conversion has a large fixed part:
SmolLM2's 538 MB took 29 s and Qwen2.5-0.5B's 2.5 GB 75 s, 2026-12-07). Where nothing was
converted here yet, aisql's own reference measurement stands in (REFERENCE_CONVERSION: SmolLM2 on
a 2-core AMD EPYC, AVX2 only), and explain says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from aisql.paths import cache_root, save_cache_file

REFERENCE_CONVERSION = (538_060_032, 29.4)  # (weights written, seconds) measured by aisql, see above
KEPT = 20  # the latest conversions kept


@dataclass(frozen=True)
class FirstRunCost:
    what: str  # "GGUF conversion" | "number-format trial"
    seconds: float
    how: str  # where the figure comes from


def _path() -> Path:
    return cache_root() / "conversions.json"


def remember_conversion(written_bytes: int, seconds: float) -> None:
    """One conversion's output size and time (best effort: a read-only cache loses the estimate)."""
    try:
        done = json.loads(_path().read_text())
    except (OSError, ValueError):
        done = []
    done = (done if isinstance(done, list) else [])[-(KEPT - 1) :] + [{"written_bytes": int(written_bytes), "seconds": round(seconds, 2)}]
    save_cache_file(_path(), json.dumps(done, indent=1))


def conversion_estimate(written_bytes: int) -> FirstRunCost:
    """A conversion's time from the weights it will write: fitted on the conversions measured
    here, else aisql's reference measurement."""
    try:
        done = [(float(d["written_bytes"]), float(d["seconds"])) for d in json.loads(_path().read_text()) if d.get("written_bytes") and d.get("seconds")]
    except (OSError, ValueError, TypeError, AttributeError, KeyError):
        done = []
    if not done:
        size, seconds = REFERENCE_CONVERSION
        return FirstRunCost("GGUF conversion", seconds * (written_bytes / size) ** 0.5, "from aisql's reference measurement: nothing converted on this machine yet")
    how = f"from {len(done)} conversion{'s' if len(done) != 1 else ''} measured here"
    return FirstRunCost("GGUF conversion", seconds_by_size(done, written_bytes), how)


def seconds_by_size(points: list[tuple[float, float]], size: float) -> float:
    """A one-time cost (a conversion, a load) for `size` from (size, seconds) measured here: a line
    through them where their sizes differ, else their mean scaled by the square root of the size
    ratio (at these sizes the cost is mostly fixed: imports, kernel choice, file setup)."""
    if len({x for x, _ in points}) >= 2:
        n = len(points)
        mean_x, mean_y = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
        slope = max(0.0, sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x, _ in points))
        return max(0.0, mean_y - slope * mean_x) + slope * size
    base, seconds = points[0][0], sum(y for _, y in points) / len(points)
    return seconds * (size / base) ** 0.5


def numerics_trial_estimate(trial_tokens: int, tokens_per_s: float, how: str) -> FirstRunCost:
    """The number-format trial: its questions answered once in float32 and once in bfloat16."""
    return FirstRunCost("number-format trial", 2 * trial_tokens / tokens_per_s, how)
