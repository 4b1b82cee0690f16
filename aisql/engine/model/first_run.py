"""What a model's first run on this machine costs before its first answer, so `explain` can say
it: a GGUF file's conversion (once per file) and, on a CPU that computes bfloat16 natively, the
number-format trial (once per model and CPU kind). The model load is priced by
aisql.executor.estimates.throughput, from loads measured here.

Conversions are timed as they happen and kept in a small JSON file of the cache
(`conversions.json`: GGUF bytes and seconds); a file never converted here is priced from those,
in proportion to its size. Where nothing was converted here yet, the figure comes from aisql's own
reference measurement (REFERENCE_CONVERSION: SmolLM2's 98 MB Q4_1 file in 26 s on a 2-core AMD
EPYC, AVX2 only, 2026-12-07), and explain says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from aisql.paths import cache_root, save_cache_file

REFERENCE_CONVERSION = (98_000_000, 26.0)  # (GGUF bytes, seconds) measured by aisql, see above
KEPT = 20  # the latest conversions kept


@dataclass(frozen=True)
class FirstRunCost:
    what: str  # "GGUF conversion" | "number-format trial"
    seconds: float
    how: str  # where the figure comes from


def _path() -> Path:
    return cache_root() / "conversions.json"


def remember_conversion(gguf_bytes: int, seconds: float) -> None:
    """One conversion's size and time (best effort: a read-only cache only loses the estimate)."""
    try:
        done = json.loads(_path().read_text())
    except (OSError, ValueError):
        done = []
    done = (done if isinstance(done, list) else [])[-(KEPT - 1) :] + [{"gguf_bytes": int(gguf_bytes), "seconds": round(seconds, 2)}]
    save_cache_file(_path(), json.dumps(done, indent=1))


def conversion_estimate(gguf_bytes: int) -> FirstRunCost:
    """A conversion's time, in proportion to the GGUF's size: from the conversions measured here
    (bytes per second over all of them), else from aisql's reference measurement."""
    try:
        done = [d for d in json.loads(_path().read_text()) if d.get("gguf_bytes") and d.get("seconds")]
    except (OSError, ValueError, TypeError, AttributeError):
        done = []
    if done:
        rate = sum(d["gguf_bytes"] for d in done) / sum(d["seconds"] for d in done)
        how = f"from {len(done)} conversion{'s' if len(done) != 1 else ''} measured here"
    else:
        rate = REFERENCE_CONVERSION[0] / REFERENCE_CONVERSION[1]
        how = "from aisql's reference measurement: nothing converted on this machine yet"
    return FirstRunCost("GGUF conversion", gguf_bytes / rate, how)


def numerics_trial_estimate(trial_tokens: int, tokens_per_s: float, how: str) -> FirstRunCost:
    """The number-format trial: its questions answered once in float32 and once in bfloat16."""
    return FirstRunCost("number-format trial", 2 * trial_tokens / tokens_per_s, how)
