"""Which replica answers a request (`aisql serve --replicas N --routing POLICY`).

A request sent to a replica that does not hold its conversation's prefix recomputes all of it;
after one replica, routing decides an agent's time to first token. The router runs on the HTTP
edge, sees every request's token ids, and keeps per replica an *approximate* picture of what
that replica's radix KV cache holds: the chained hashes of the fixed-size token blocks it was
sent (a radix tree at block granularity, as llm-d's prefix scorer and Dynamo's KV router keep
it), each replica's LRU-bounded to its KV capacity. Approximate because the replica evicts on
its own schedule; a wrong guess costs a recomputation, never a wrong answer.

Policies (one class each, chosen once when the server starts):
- `cache-aware`: the replica where the request's first token comes soonest by a count of work
  (Dynamo's KV router's cost): the prompt's blocks that replica does *not* hold, plus the
  uncached blocks of the requests already routed there and not finished, plus one per such
  request (its decoding). A conversation's next turn goes home, where only its new tokens are
  computed; new conversations spread, since a shared system prompt cached on one replica
  saves less than the queue there costs. A conversation the client names (`user`,
  `X-Session-Id`) stays where it went first; any choice yields to the least-loaded replica
  when the chosen one has more than `imbalance` requests above it (SGLang's escape from hot
  spots);
- `round-robin` and `least-load`: the baselines.

Pure: no Ray, no HTTP, no model. The pool (aisql.serve.replicas) tells the router which
replicas are alive and how loaded, and what it sent and what finished.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

BLOCK_TOKENS = 16
DEFAULT_IMBALANCE = 8
from aisql.serve.choices import ROUTING_POLICIES as POLICIES  # noqa: E402


def block_hashes(tokens: Sequence[int], salt: str | None = None, block: int = BLOCK_TOKENS) -> list[int]:
    """Chained hashes of the prompt's whole blocks: hash i stands for tokens[: (i + 1) * block]
    under `salt` (the cache partition: two partitions never share a prefix)."""
    chained = hash(("aisql-prefix", salt))
    out = []
    for start in range(0, len(tokens) - block + 1, block):
        chained = hash((chained, tuple(tokens[start : start + block])))
        out.append(chained)
    return out


class PrefixIndex:
    """What one replica was sent, as block hashes, least recently used first, at most
    `capacity` blocks (the replica's KV capacity in blocks)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def matched(self, hashes: Sequence[int]) -> int:
        """How many leading blocks of a prompt this replica is thought to hold."""
        count = 0
        for h in hashes:
            if h not in self._blocks:
                break
            count += 1
        return count

    def add(self, hashes: Sequence[int]) -> None:
        for h in hashes:
            self._blocks[h] = None
            self._blocks.move_to_end(h)
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)

    def clear(self) -> None:
        self._blocks.clear()


@dataclass
class ReplicaState:
    """What the router may know of a replica: alive (loaded, not dead) and its outstanding requests."""

    name: str
    alive: bool = False
    load: int = 0


@dataclass(frozen=True)
class RouteRequest:
    prompt_ids: Sequence[int]
    salt: str | None = None
    session: str | None = None  # a conversation the client named


class NoReplica(Exception):
    """Every replica is dead or still loading."""


class Router:
    """The baseline's interface; `cache-aware` adds what it remembers."""

    policy = ""

    def __init__(self, replicas: Sequence[ReplicaState]) -> None:
        self.replicas = list(replicas)

    def choose(self, request: RouteRequest) -> int:
        raise NotImplementedError

    def route(self, request: RouteRequest) -> int:
        """Choose a replica and record the request as sent there."""
        replica = self.choose(request)
        self.sent(replica, request)
        return replica

    def sent(self, replica: int, request: RouteRequest) -> None:
        """A request went to `replica` (its prompt is now being computed there)."""

    def done(self, request: RouteRequest) -> None:
        """A routed request ended, however (its queued work is no longer ahead of others)."""

    def finished(self, replica: int, tokens: Sequence[int], salt: str | None) -> None:
        """A request finished on `replica`: its prompt + output are in that replica's cache."""

    def forget(self, replica: int) -> None:
        """The replica died: whatever it held is gone."""

    def _alive(self) -> list[int]:
        alive = [i for i, r in enumerate(self.replicas) if r.alive]
        if not alive:
            raise NoReplica("no replica is ready")
        return alive

    def _least_loaded(self, candidates: Sequence[int]) -> int:
        return min(candidates, key=lambda i: (self.replicas[i].load, i))


class RoundRobinRouter(Router):
    policy = "round-robin"

    def __init__(self, replicas: Sequence[ReplicaState]) -> None:
        super().__init__(replicas)
        self._next = 0

    def choose(self, request: RouteRequest) -> int:
        alive = self._alive()
        for _ in range(len(self.replicas)):
            index = self._next % len(self.replicas)
            self._next += 1
            if index in alive:
                return index
        return alive[0]


class LeastLoadRouter(Router):
    policy = "least-load"

    def choose(self, request: RouteRequest) -> int:
        return self._least_loaded(self._alive())


class CacheAwareRouter(Router):
    policy = "cache-aware"

    def __init__(
        self,
        replicas: Sequence[ReplicaState],
        capacity_blocks: Sequence[int],
        imbalance: int = DEFAULT_IMBALANCE,
        block: int = BLOCK_TOKENS,
        max_sessions: int = 100_000,
    ) -> None:
        super().__init__(replicas)
        self.block = block
        self.imbalance = imbalance
        self.indexes = [PrefixIndex(c) for c in capacity_blocks]
        self.queued = [0] * len(self.replicas)  # uncached blocks of the requests in flight, per replica
        self._in_flight: dict[int, tuple[int, int]] = {}  # id(request) -> (replica, its uncached blocks)
        self._last: tuple[RouteRequest, list[int]] | None = None  # choose() then sent() hash a prompt once
        self._sessions: OrderedDict[str, int] = OrderedDict()
        self._max_sessions = max_sessions

    def choose(self, request: RouteRequest) -> int:
        alive = self._alive()
        least = self._least_loaded(alive)
        sticky = self._sessions.get(request.session) if request.session else None
        if sticky is not None and sticky in alive:
            chosen = sticky
        else:
            hashes = self._hashes(request)
            chosen = min(alive, key=lambda i: (self._cost(i, hashes), i))
        if self.replicas[chosen].load - self.replicas[least].load > self.imbalance:
            chosen = least
        return chosen

    def _cost(self, replica: int, hashes: Sequence[int]) -> int:
        """Blocks of work before this prompt's first token on `replica`: its own uncached blocks,
        those queued ahead of it, one per request decoding there."""
        return len(hashes) - self.indexes[replica].matched(hashes) + self.queued[replica] + self.replicas[replica].load

    def _hashes(self, request: RouteRequest) -> list[int]:
        if self._last is None or self._last[0] is not request:
            self._last = (request, block_hashes(request.prompt_ids, request.salt, self.block))
        return self._last[1]

    def sent(self, replica: int, request: RouteRequest) -> None:
        hashes = self._hashes(request)
        uncached = len(hashes) - self.indexes[replica].matched(hashes)
        self.indexes[replica].add(hashes)
        self.queued[replica] += uncached
        self._in_flight[id(request)] = (replica, uncached)
        if request.session:
            self._sessions[request.session] = replica
            self._sessions.move_to_end(request.session)
            while len(self._sessions) > self._max_sessions:
                self._sessions.popitem(last=False)

    def done(self, request: RouteRequest) -> None:
        replica, uncached = self._in_flight.pop(id(request), (None, 0))
        if replica is not None:
            self.queued[replica] = max(0, self.queued[replica] - uncached)

    def finished(self, replica: int, tokens: Sequence[int], salt: str | None) -> None:
        self.indexes[replica].add(block_hashes(tokens, salt, self.block))

    def forget(self, replica: int) -> None:
        self.indexes[replica].clear()
        self.queued[replica] = 0
        for key in [k for k, (r, _) in self._in_flight.items() if r == replica]:
            del self._in_flight[key]
        for session in [s for s, r in self._sessions.items() if r == replica]:
            del self._sessions[session]


def make_router(
    policy: str, replicas: Sequence[ReplicaState], capacity_blocks: Sequence[int], imbalance: int = DEFAULT_IMBALANCE
) -> Router:
    if policy == "cache-aware":
        return CacheAwareRouter(replicas, capacity_blocks, imbalance)
    if policy == "round-robin":
        return RoundRobinRouter(replicas)
    if policy == "least-load":
        return LeastLoadRouter(replicas)
    raise ValueError(f"unknown routing policy {policy!r}: use one of {', '.join(POLICIES)}")
