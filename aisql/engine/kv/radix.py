"""Radix (prefix-tree) KV cache over token ids.

Every prompt the engine sees is a path from the root; an edge holds a run of tokens and, when
cached, their keys and values for every layer. Any prompt reuses the longest cached prefix,
whoever computed it: another row, another AI node, an earlier query, an earlier conversation turn.

The interface (after SGLang's BasePrefixCache, with typed results):
- `match_prefix(tokens) -> Match`: the deepest cached node prefixing `tokens`;
- `insert(tokens) -> chain`: the path's nodes as structure (ghosts until they get KV);
- `insert_kv(chain, kv_of) -> Inserted`: store the KV of a computed path, top-down;
- `lock(node)` / `unlock(node)`: a batch reading a path keeps all of it from eviction;
- `kv_segments(node, length)`: the cached pieces of a path, to read in place; `gather` copies
  them into one tensor per layer;
- `evict(bytes) -> Evicted`.

Memory is bounded in bytes. Only KV leaves are evicted (a child's KV is useless without its
ancestors'), none that is locked, in the order an `EvictionPolicy` gives. The cache keeps the set
of KV leaves up to date as nodes gain and lose KV, so an eviction orders that set (a heap), never
walks the tree. An evicted node stays as a *ghost* (tokens, no tensors): recomputing a ghost is
counted as KV regret, tokens computed more than once.

Isolation: a `salt` (vLLM's `cache_salt`; the server derives one per API key) gives a request its
own root. Paths under different roots never share KV, so one client cannot learn from cache hits
what another client's prompts held. The batch engine uses the shared root (salt None).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import torch

from aisql.engine.kv.eviction import EvictionPolicy, ExpectedReuse

LayerKV = tuple[torch.Tensor, torch.Tensor]  # keys, values: [kv_heads, tokens, head_dim]


BATCH_EVICTION_LEAVES = 1024  # above this many KV leaves, evict in slices of the budget...
BATCH_EVICTION_SHARE = 32  # ...of 1/32 of it (small caches keep evicting exactly what is needed)

class RadixNode:
    __slots__ = ("tokens", "parent", "children", "start", "kv", "cached_children", "pending", "pins", "uses", "last_access", "computed")

    def __init__(self, tokens: tuple[int, ...], parent: "RadixNode | None", start: int) -> None:
        self.tokens = tokens  # the edge from the parent
        self.parent = parent
        self.children: dict[int, RadixNode] = {}
        self.start = start  # position of tokens[0] in every prompt through this node
        self.kv: list[LayerKV] | None = None
        self.cached_children = 0  # children holding KV (a node with none is a KV leaf)
        self.pending = 0  # requests of the running call that pass through this node
        self.pins = 0  # locks held by batches reading this node's KV
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


@dataclass(frozen=True)
class Match:
    node: RadixNode  # the node the matched prefix ends in, its whole path cached (the root: none)
    length: int  # matched tokens: node.end, or fewer when the match ends inside node's edge


@dataclass(frozen=True)
class Inserted:
    stored_tokens: int  # tokens whose KV was stored by this call
    complete: bool  # every node of the chain holds KV now


@dataclass(frozen=True)
class Evicted:
    bytes: int
    nodes: int


@dataclass
class RadixStats:
    evicted_bytes: int = 0
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
        policy: EvictionPolicy | None = None,
    ) -> None:
        self.root = RadixNode((), None, 0)  # the shared tree (salt None)
        self._salted: dict[str, RadixNode] = {}
        self.budget_bytes = budget_bytes
        self.bytes_per_token = bytes_per_token
        # FLOPs to recompute tokens [start, end): by default proportional to their number.
        self.recompute_cost = recompute_cost or (lambda start, end: float(end - start))
        self.policy: EvictionPolicy = policy or ExpectedReuse(self.recompute_cost, bytes_per_token)
        self.max_ghost_tokens = max_ghost_tokens
        self.used_bytes = 0
        self.ghost_tokens = 0
        self.stats = RadixStats()
        self._kv_leaves: set[RadixNode] = set()
        self._clock = itertools.count(1)

    def empty_like(self) -> "RadixCache":
        """A new, empty cache with this one's budget, cost model and policy; counters carried on."""
        fresh = RadixCache(self.budget_bytes, self.bytes_per_token, self.recompute_cost, self.max_ghost_tokens, self.policy)
        fresh.stats = self.stats
        return fresh

    # ---- structure -------------------------------------------------------------------------
    def root_for(self, salt: str | None) -> RadixNode:
        if salt is None:
            return self.root
        root = self._salted.get(salt)
        if root is None:
            root = self._salted[salt] = RadixNode((), None, 0)
        return root

    def insert(self, tokens: Sequence[int], salt: str | None = None) -> list[RadixNode]:
        """The chain of nodes spelling `tokens` exactly, creating (ghost) nodes and splitting
        edges as needed. The last node ends at len(tokens)."""
        tokens = tuple(tokens)
        node = self.root_for(salt)
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

    def match_prefix(self, tokens: Sequence[int], salt: str | None = None) -> Match:
        """The longest prefix of `tokens` whose KV the tree holds, and the node it ends in. As in
        SGLang, a match may end inside an edge: `length` then stops short of `node.end`, and the
        node's KV covers the matched part (readers take `length` tokens: `gather`, `kv_segments`).
        Nothing is split: matching never changes the tree."""
        tokens = tuple(tokens)
        node = self.root_for(salt)
        best, best_len = node, 0
        position = 0
        while position < len(tokens):
            child = node.children.get(tokens[position])
            if child is None or child.kv is None:
                break
            common = _common_length(child.tokens, tokens, position)
            position += common
            best, best_len = child, position
            if common < len(child.tokens):
                break  # the prompt leaves this edge part-way: its first `common` tokens still match
            node = child
        return Match(best, best_len)

    def deepest_cached(self, chain: Sequence[RadixNode]) -> RadixNode:
        """Along a chain from a root, the last node before the first one without KV (the chain's
        root when the first has none)."""
        best = chain[0].parent if chain else self.root
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
            upper.cached_children = 1  # `node` stays the KV leaf (or not) it was
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
            need = self.used_bytes + size - self.budget_bytes
            if len(self._kv_leaves) > BATCH_EVICTION_LEAVES:
                # evict() orders every KV leaf: with thousands, doing it for each insert made a
                # full cache quadratic (20k leaves: ~3 ms an insert, a stream of prompts slowed
                # 100x). Freeing a slice of the budget at once runs it once per many inserts.
                need = max(need, self.budget_bytes // BATCH_EVICTION_SHARE)
            self.evict(need, protect=node)
            if self.used_bytes + size > self.budget_bytes:
                return False
        node.kv = kv
        self.used_bytes += size
        self.ghost_tokens -= len(node.tokens)
        self.stats.peak_bytes = max(self.stats.peak_bytes, self.used_bytes)
        self._kv_leaves.add(node)
        parent = node.parent
        parent.cached_children += 1
        self._kv_leaves.discard(parent)
        self.touch(node)
        return True

    def insert_kv(self, chain: Sequence[RadixNode], kv_of: Callable[[int, int], list[LayerKV]]) -> Inserted:
        """Store the KV of a computed path, top-down, for its nodes that lack it; `kv_of(start,
        end)` gives the KV of positions [start, end). Stops at the first node the budget cannot
        hold (its descendants would be useless without it)."""
        stored = 0
        for node in chain:
            if node.kv is not None:
                continue
            if not self.store(node, kv_of(node.start, node.end)):
                return Inserted(stored, False)
            stored += len(node.tokens)
        return Inserted(stored, True)

    def evict(self, need_bytes: int, protect: RadixNode | None = None) -> Evicted:
        """Free at least `need_bytes` (if possible) from KV leaves in policy order; never a
        locked node, nor `protect` or its ancestors."""
        kept = set(protect.path()) if protect is not None else set()
        order = itertools.count()
        heap = [(self.policy.priority(n), next(order), n) for n in self._kv_leaves if n.pins == 0 and n not in kept]
        heapq.heapify(heap)
        freed = nodes = 0
        while freed < need_bytes and heap:
            _, _, node = heapq.heappop(heap)
            freed += self._drop_kv(node)
            nodes += 1
            parent = node.parent
            if parent in self._kv_leaves and parent.pins == 0 and parent not in kept:
                heapq.heappush(heap, (self.policy.priority(parent), next(order), parent))
        self._prune_ghosts()
        return Evicted(freed, nodes)

    def _drop_kv(self, node: RadixNode) -> int:
        size = self.node_bytes(node)
        node.kv = None
        self.used_bytes -= size
        self.ghost_tokens += len(node.tokens)
        self.stats.evicted_bytes += size
        self._kv_leaves.discard(node)
        parent = node.parent
        parent.cached_children -= 1
        if parent.kv is not None and parent.cached_children == 0:
            self._kv_leaves.add(parent)
        return size

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

    # ---- reading ---------------------------------------------------------------------------
    def kv_segments(self, node: RadixNode, length: int) -> list[tuple[RadixNode, int]]:
        """The path to `node` as (node, tokens to read from it) pieces covering `length` tokens:
        what a kernel reading cached KV in place needs (no copy)."""
        pieces = []
        for part in node.path():
            if part.start >= length:
                break
            pieces.append((part, min(part.end, length) - part.start))
        return pieces

    def gather(self, node: RadixNode, length: int) -> list[LayerKV]:
        """KV of the path to `node`, truncated to `length` tokens, per layer ([kv_heads, length,
        head_dim]): one copy of the pieces."""
        pieces = self.kv_segments(node, length)
        out = []
        for layer in range(len(pieces[0][0].kv)):
            keys = torch.cat([part.kv[layer][0][:, :count] for part, count in pieces], dim=1)
            values = torch.cat([part.kv[layer][1][:, :count] for part, count in pieces], dim=1)
            out.append((keys, values))
        return out

    # ---- bookkeeping -----------------------------------------------------------------------
    def touch(self, node: RadixNode) -> None:
        stamp = next(self._clock)
        for n in node.path():
            n.last_access = stamp

    # Reuse counts have one writer, the cache: the batch scheduler and the serving loop report
    # requests through these three calls, and eviction policies only read the counts.
    def begin_use(self, chain: Sequence[RadixNode]) -> None:
        """A request of the running call will pass through `chain`: it counts towards the nodes'
        expected reuse (pending) and their history (uses) until `end_use`."""
        for node in chain:
            node.pending += 1
            node.uses += 1

    def end_use(self, chain: Sequence[RadixNode]) -> None:
        """The request is done: a finished group's prefix becomes evictable once its last
        request has run."""
        for node in chain:
            node.pending -= 1
        if chain:
            self.touch(chain[-1])

    def record_use(self, chain: Sequence[RadixNode]) -> None:
        """A request passed through `chain` and is done (serving: a finished turn's sequence)."""
        for node in chain:
            node.uses += 1
        if chain:
            self.touch(chain[-1])

    def record_computed(self, node: RadixNode, tokens: int | None = None) -> None:
        """`tokens` of `node` (all by default) were run through the model."""
        count = len(node.tokens) if tokens is None else tokens
        if node.computed:
            self.stats.regret_tokens += count
        node.computed += 1

    def lock(self, node: RadixNode) -> None:
        """A batch reads the path to `node`: none of it may be evicted until `unlock`."""
        for part in node.path():
            part.pins += 1

    def unlock(self, node: RadixNode) -> None:
        for part in node.path():
            part.pins -= 1

    def nodes(self) -> Iterator[RadixNode]:
        stack = [child for root in (self.root, *self._salted.values()) for child in root.children.values()]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def cached_tokens(self) -> int:
        return sum(len(n.tokens) for n in self.nodes() if n.kv is not None)


def _common_length(edge: tuple[int, ...], tokens: tuple[int, ...], position: int) -> int:
    limit = min(len(edge), len(tokens) - position)
    i = 0
    while i < limit and edge[i] == tokens[position + i]:
        i += 1
    return i
