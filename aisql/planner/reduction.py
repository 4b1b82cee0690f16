"""The map/reduce arithmetic of AI aggregation, on token sizes alone.

Shared by the cost model (explain's map and reduce prompts, depth) and the executor
(aisql.executor.answers.aggregate packs real texts with the same capacity rule), so the estimate and the
run count prompts the same way.
"""

from __future__ import annotations

from typing import Sequence

SAFETY_TOKENS = 16  # the tokenizer may merge across an item boundary: keep a margin


def packing_capacity(context: int, overhead: int, max_tokens: int) -> int:
    """Tokens of items one prompt holds: the context less the framing and task, the answer and a margin."""
    return context - overhead - max_tokens - SAFETY_TOKENS


def reduction_plan(group_tokens: Sequence[float], capacity: float, max_tokens: int) -> tuple[int, int, int]:
    """(map prompts, reduce prompts, depth) for groups of these token sizes — the same packing
    arithmetic as the executor's, on sizes alone (for explain). Depth 1: one prompt per group."""
    maps = reduces = depth = 0
    for tokens in group_tokens:
        if tokens <= 0:
            continue
        items = max(1, -(-int(tokens) // max(1, int(capacity))))
        maps += items
        level = 1
        per_prompt = max(2, int(capacity // (max_tokens + 4)))
        while items > 1:
            prompts = items // per_prompt + (1 if items % per_prompt > 1 else 0)
            prompts = max(1, prompts)
            reduces += prompts
            items = prompts + (1 if items % per_prompt == 1 else 0)
            level += 1
        depth = max(depth, level)
    return maps, reduces, depth
