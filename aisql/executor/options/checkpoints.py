"""How many prompts go into the next checkpoint chunk: a few seconds of model time, on this machine.

A chunk is the unit of loss (a crash or Ctrl-C loses at most the chunk in flight) and of
progress (the bar moves once per chunk), so its size is bounded by *time*, not only by a prompt
count: on a slow or busy machine a fixed 256-prompt chunk was a whole node (minutes of paid work
lost on Ctrl-C, a bar stuck at 0). The first chunk of a run is small, because nothing has been
measured yet on this machine for this model; each later one holds about `seconds` of model time
at the rate the run measured last (prompt tokens per second, which carries across nodes whose
prompts differ in length better than prompts per second), never more than `chunk_prompts` (the run's checkpoint_every).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

DEFAULT_SECONDS = 5.0  # model time between two commits (and two progress updates)
FIRST_CHUNK_PROMPTS = 8  # before any measurement: small, so the first commit comes early anywhere


@dataclass
class ChunkSizer:
    """One per run (shared by its nodes), so a node after the first starts at the measured rate."""

    chunk_prompts: int  # at most this many prompts in a chunk: the run's checkpoint_every
    seconds: float = DEFAULT_SECONDS
    tokens_per_s: float | None = None  # prompt tokens answered per second of model time, last measured
    first_chunk: int = FIRST_CHUNK_PROMPTS  # the chunk before any measurement

    def next_size(self, token_counts: Sequence[int]) -> int:
        """How many of the next prompts (their prompt token counts, in order) make the next chunk."""
        limit = max(1, self.chunk_prompts)
        if self.tokens_per_s is None:
            return max(1, min(limit, self.first_chunk, len(token_counts)))
        allowance = self.tokens_per_s * self.seconds
        size, tokens = 0, 0
        for count in token_counts[:limit]:
            if size and tokens + count > allowance:
                break
            size += 1
            tokens += count
        return max(1, size)

    def measured(self, tokens: int, seconds: float) -> None:
        """A chunk of `tokens` prompt tokens took `seconds` of model time."""
        if tokens > 0 and seconds > 0:
            self.tokens_per_s = tokens / seconds
