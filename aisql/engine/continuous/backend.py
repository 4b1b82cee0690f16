"""What the serving loop needs of the engine under it: a declared interface, not HFEngine's
insides. HFEngine (aisql.engine.backends.hf) provides it; another embedded engine that wants
continuous batching provides these members and nothing else is read."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from aisql.engine.base import EngineStats, ModelInfo


@runtime_checkable
class ServingBackend(Protocol):
    info: ModelInfo  # max_context bounds a request
    stats: EngineStats  # the model's work, counted once, by the engine
    lock: threading.RLock  # one batch call or serving step at a time
    runner: Any  # aisql.engine.batch.model_runner.ModelRunner: forward passes, logits, KV caches
    speculation: object | None  # prompt-lookup drafting on (a SpeculationConfig) or off
    stop_ids: set[int] | frozenset[int]  # tokens that end a generation

    @property
    def kv_budget_bytes(self) -> int:
        """The prefix cache's memory budget (the default KV admission limit)."""

    def drafter(self, tokens: list[int]) -> Any:
        """A draft source over a request's tokens (propose / feedback / extend)."""

    def cached_prefix_length(self, prompt: Sequence[int], salt: str | None = None) -> int:
        """Prompt tokens the prefix cache would serve now."""

    @property
    def mixed_passes(self) -> bool:
        """Whether decode rows and prompt chunks may share a pass (the mixed pass's attention
        is registered for this model)."""

    def share_prefixes(self, prompts: Sequence[Sequence[int]], salts: Sequence[str | None] | None = None) -> None:
        """Compute once the uncached prefixes two or more of these prompts share."""

    def cached_prefix_pieces(self, prompt: Sequence[int], salt: str | None = None) -> list:
        """The prompt's cached prefix as the prefix tree's (node, tokens) pieces; counted as hits."""

    def start_sequence(self, prompt: Sequence[int], salt: str | None = None) -> tuple[Any, int]:
        """A KV cache for one sequence seeded with its cached prefix: (cache, cached tokens), for
        the separate-pass path."""

    def store_sequence(self, tokens: Sequence[int], kv_of: Callable[[int, int], list], salt: str | None = None) -> None:
        """Keep a finished sequence's KV in the prefix cache for the next turn."""

    def sync_cache_stats(self) -> None:
        """Bring the cache-size levels of `stats` up to date after a step."""
