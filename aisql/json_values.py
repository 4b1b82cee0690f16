"""Values as JSON can hold them: one rule for every JSON aisql writes (query results, stats)."""

from __future__ import annotations

import math
from typing import Any


def json_safe(value: Any) -> tuple[Any, int]:
    """`value` with every NaN and ±Infinity float as None (JSON has no such numbers: Python's
    `Infinity` / `NaN` tokens make the output unreadable to any JSON parser), and how many."""
    count = 0

    def walk(item: Any) -> Any:
        nonlocal count
        if isinstance(item, float) and not math.isfinite(item):
            count += 1
            return None
        if isinstance(item, dict):
            return {key: walk(v) for key, v in item.items()}
        if isinstance(item, (list, tuple)):
            return [walk(v) for v in item]
        return item

    return walk(value), count
