"""Radix (prefix-tree) KV cache over token ids.

Every prompt the engine sees is a path from the root; an edge holds a run of tokens and, when
cached, their keys and values for every layer. Any prompt reuses the longest cached prefix,
whoever computed it: another row, another AI node, an earlier query.

Memory is bounded in bytes. Eviction is by value — expected reuse x recompute cost / bytes, with
least-recently-used as the tie-break — and only ever removes the KV of a node none of whose
descendants holds KV (a child is useless without its ancestors) and that no running batch has
pinned. An evicted node stays in the tree as a *ghost* (tokens, no tensors): recomputing a ghost
is counted as KV regret, tokens computed more than once.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import torch

LayerKV = tuple[torch.Tensor, torch.Tensor]  # keys, values: [kv_heads, tokens, head_dim]


class RadixNode:
    __slots__ = (
        "tokens",
        "parent",
        "children",
        "start",
        "kv",
        "pending",
        "pins",
        "uses",
        "last_access",
        "computed",
    )

    def __init__(self, tokens: tuple[int, ...], parent: "RadixNode | None", start: int) -> None:
        self.tokens = tokens  # the edge from the parent
        self.parent = parent
        self.children: dict[int, RadixNode] = {}
        self.start = start  # position of tokens[0] in every prompt through this node
        self.kv: list[LayerKV] | None = None
        self.pending = 0  # requests of the running call that pass through this node
        self.pins = 0  # running batches that read this node's KV
        self.uses = 0  # requests that ever passed through (reuse history)
        self.last_access = 0
        self.computed = 0  # times its tokens were run through the model

    @property
    def end(self) -> int:
        return self.start + len(self.tokens)

    @property
    def is_root(self) -> bool:
        return self.parent is None

    def path(self) -> list["RadixNode"]:
        """Nodes from the root's first child down to this node."""
        out = []
        node: RadixNode | None = self
        while node is not None and not node.is_root:
            out.append(node)
            node = node.parent
        out.reverse()
        return out

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        state = "kv" if self.kv is not None else "ghost"
        return f"RadixNode([{self.start}:{self.end}] {state} pending={self.pending})"


@dataclass
class RadixStats:
    hit_tokens: int = 0  # prompt tokens served from cached KV
    inserted_tokens: int = 0
    evicted_bytes: int = 0
    evicted_tokens: int = 0
    regret_tokens: int = 0  # tokens computed although they had been computed before
    peak_bytes: int = 0


class RadixCache:
    """Prefix tree + KV storage under a byte budget."""

    def __init__(
        self,
        budget_bytes: int,
        bytes_per_token: int,
        recompute_cost: Callable[[int, int], float] | None = None,
        max_ghost_tokens: int = 20_000_000,
    ) -> None:
        self.root = RadixNode((), None, 0)
        self.budget_bytes = budget_bytes
        self.bytes_per_token = bytes_per_token
        # FLOPs to recompute tokens [start, end): by default proportional to their number.
        self.recompute_cost = recompute_cost or (lambda start, end: float(end - start))
        self.max_ghost_tokens = max_ghost_tokens
        self.used_bytes = 0
        self.ghost_tokens = 0
        self.stats = RadixStats()
        self._clock = itertools.count(1)

    # ---- structure -------------------------------------------------------------------------
    def insert_path(self, tokens: Sequence[int]) -> list[RadixNode]:
        """The chain of nodes spelling `tokens` exactly, creating (ghost) nodes and splitting
        edges as needed. The last node ends at len(tokens)."""
        tokens = tuple(tokens)
        node = self.root
        chain: list[RadixNode] = []
        position = 0
        while position < len(tokens):
            child = node.children.get(tokens[position])
            if child is None:
                child = RadixNode(tokens[position:], node, position)
                node.children[tokens[position]] = child
                self.ghost_tokens += len(child.tokens)
                chain.append(child)
                break
            common = _common_length(child.tokens, tokens, position)
            if common < len(child.tokens):
                child = self._split(child, common)
            chain.append(child)
            position += len(child.tokens)
            node = child
        return chain

    def match(self, tokens: Sequence[int]) -> tuple[RadixNode, int]:
        """Deepest node whose whole path has KV and is a prefix of `tokens`, and its length."""
        tokens = tuple(tokens)
        node = self.root
        best, best_len = self.root, 0
        position = 0
        while position < len(tokens):
            child = node.children.get(tokens[position])
            if child is None or child.kv is None:
                break
            if _common_length(child.tokens, tokens, position) < len(child.tokens):
                break
            position += len(child.tokens)
            node = best = child
            best_len = position
        return best, best_len

    def deepest_cached(self, chain: Sequence[RadixNode]) -> RadixNode:
        """Along a chain from the root, the last node before the first one without KV."""
        best = self.root
        for node in chain:
            if node.kv is None:
                break
            best = node
        return best

    def _split(self, node: RadixNode, at: int) -> RadixNode:
        """Split `node`'s edge after `at` tokens; returns the new upper node."""
        parent = node.parent
        upper = RadixNode(node.tokens[:at], parent, node.start)
        upper.pending, upper.uses, upper.last_access = node.pending, node.uses, node.last_access
        upper.pins, upper.computed = node.pins, node.computed
        parent.children[upper.tokens[0]] = upper
        node.tokens = node.tokens[at:]
        node.start += at
        node.parent = upper
        upper.children[node.tokens[0]] = node
        if node.kv is not None:
            upper.kv = [(k[:, :at].clone(), v[:, :at].clone()) for k, v in node.kv]
            node.kv = [(k[:, at:].clone(), v[:, at:].clone()) for k, v in node.kv]
        return upper

    # ---- KV --------------------------------------------------------------------------------
    def node_bytes(self, node: RadixNode) -> int:
        return len(node.tokens) * self.bytes_per_token

    def store(self, node: RadixNode, kv: list[LayerKV]) -> bool:
        """Keep `kv` for `node` if the budget allows (evicting lower-value KV); False if not."""
        if node.kv is not None:
            return True
        if not node.parent.is_root and node.parent.kv is None:
            return False  # a child's KV is useless without its ancestors'
        size = self.node_bytes(node)
        if size > self.budget_bytes:
            return False
        if self.used_bytes + size > self.budget_bytes:
            self.evict(self.used_bytes + size - self.budget_bytes, protect=node)
            if self.used_bytes + size > self.budget_bytes:
                return False
        node.kv = kv
        self.used_bytes += size
        self.ghost_tokens -= len(node.tokens)
        self.stats.inserted_tokens += len(node.tokens)
        self.stats.peak_bytes = max(self.stats.peak_bytes, self.used_bytes)
        self.touch(node)
        return True

    def value(self, node: RadixNode) -> float:
        """Expected reuse x recompute cost / bytes: what keeping this KV is worth per byte."""
        expected = node.pending + (0.5 if node.uses > 1 else 0.0)
        return expected * self.recompute_cost(node.start, node.end) / max(1, self.node_bytes(node))

    def evict(self, need_bytes: int, protect: RadixNode | None = None) -> int:
        """Free at least `need_bytes` (if possible) from the lowest-value evictable nodes."""
        freed = 0
        while freed < need_bytes:
            candidates = [n for n in self._kv_leaves() if n.pins == 0 and n is not protect and not _is_ancestor(n, protect)]
            if not candidates:
                break
            candidates.sort(key=lambda n: (self.value(n), n.last_access))
            for node in candidates:
                if freed >= need_bytes:
                    break
                freed += self._drop_kv(node)
        self._prune_ghosts()
        return freed

    def _drop_kv(self, node: RadixNode) -> int:
        size = self.node_bytes(node)
        node.kv = None
        self.used_bytes -= size
        self.ghost_tokens += len(node.tokens)
        self.stats.evicted_bytes += size
        self.stats.evicted_tokens += len(node.tokens)
        return size

    def _kv_leaves(self) -> Iterator[RadixNode]:
        """Nodes with KV whose children all lack KV (evicting them keeps every path usable)."""
        stack = [self.root]
        while stack:
            node = stack.pop()
            cached_children = [c for c in node.children.values() if c.kv is not None]
            if node.kv is not None and not cached_children:
                yield node
            stack.extend(cached_children)

    def _prune_ghosts(self) -> None:
        """Forget the oldest ghost leaves when the structure grows past its cap (regret then undercounts)."""
        if self.ghost_tokens <= self.max_ghost_tokens:
            return
        leaves = [n for n in self.nodes() if not n.children and n.kv is None and n.pending == 0 and n.pins == 0]
        leaves.sort(key=lambda n: n.last_access)
        for node in leaves:
            if self.ghost_tokens <= self.max_ghost_tokens // 2:
                break
            del node.parent.children[node.tokens[0]]
            self.ghost_tokens -= len(node.tokens)

    # ---- bookkeeping -----------------------------------------------------------------------
    def touch(self, node: RadixNode) -> None:
        stamp = next(self._clock)
        for n in node.path():
            n.last_access = stamp

    def record_computed(self, node: RadixNode, tokens: int | None = None) -> None:
        """`tokens` of `node` (all by default) were run through the model."""
        count = len(node.tokens) if tokens is None else tokens
        if node.computed:
            self.stats.regret_tokens += count
        node.computed += 1

    def pin(self, nodes: Sequence[RadixNode]) -> None:
        for node in nodes:
            node.pins += 1

    def unpin(self, nodes: Sequence[RadixNode]) -> None:
        for node in nodes:
            node.pins -= 1

    def nodes(self) -> Iterator[RadixNode]:
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def cached_tokens(self) -> int:
        return sum(len(n.tokens) for n in self.nodes() if n.kv is not None)

    def gather(self, node: RadixNode, length: int) -> list[LayerKV]:
        """KV of the path to `node`, truncated to `length` tokens, per layer ([kv_heads, length, head_dim])."""
        pieces = [n.kv for n in node.path()]
        out = []
        for layer in range(len(pieces[0])):
            keys = torch.cat([p[layer][0] for p in pieces], dim=1)[:, :length]
            values = torch.cat([p[layer][1] for p in pieces], dim=1)[:, :length]
            out.append((keys, values))
        return out


def _common_length(edge: tuple[int, ...], tokens: tuple[int, ...], position: int) -> int:
    limit = min(len(edge), len(tokens) - position)
    i = 0
    while i < limit and edge[i] == tokens[position + i]:
        i += 1
    return i


def _is_ancestor(node: RadixNode, other: RadixNode | None) -> bool:
    while other is not None:
        if other is node:
            return True
        other = other.parent
    return False
