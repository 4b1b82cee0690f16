"""Which cached KV to drop first when the prefix cache is full: a small strategy object.

The cache keeps the set of nodes it may evict (KV leaves) up to date; at eviction time it orders
that set by the policy's `priority`, lowest first. Priorities are read fresh at each eviction:
what a node is worth changes as the running call's requests come and go.
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence


class RadixNode(Protocol):
    """What a policy reads of a cached node (aisql.engine.kv.radix.RadixNode): the radix tree
    imports the policies, so they name the node by the fields they read, not by import."""

    pending: int
    uses: int
    start: int
    end: int
    tokens: Sequence[int]
    last_access: int


class EvictionPolicy(Protocol):
    def priority(self, node: RadixNode) -> tuple:
        """Lower is evicted first."""


class ExpectedReuse:
    """Expected reuse x recompute cost per byte, least recently used first among equals.

    Expected reuse: the running call's requests that still pass through the node, plus a half
    for a node that served several requests before (it may well serve more)."""

    def __init__(self, recompute_cost: Callable[[int, int], float], bytes_per_token: int) -> None:
        self.recompute_cost = recompute_cost
        self.bytes_per_token = bytes_per_token

    def value(self, node: RadixNode) -> float:
        expected = node.pending + (0.5 if node.uses > 1 else 0.0)
        return expected * self.recompute_cost(node.start, node.end) / max(1, len(node.tokens) * self.bytes_per_token)

    def priority(self, node: RadixNode) -> tuple:
        return (self.value(node), node.last_access)


class LeastRecentlyUsed:
    def priority(self, node: RadixNode) -> tuple:
        return (node.last_access,)


POLICIES = ("reuse", "lru")  # EngineOptions.kv_eviction, --kv-eviction


def eviction_policy(name: str, recompute_cost: Callable[[int, int], float], bytes_per_token: int) -> EvictionPolicy:
    """The policy an engine option names."""
    if name == "reuse":
        return ExpectedReuse(recompute_cost, bytes_per_token)
    if name == "lru":
        return LeastRecentlyUsed()
    raise ValueError(f"unknown KV eviction policy {name!r} (one of {', '.join(POLICIES)})")
