"""How one AI node's prompts are cut into shards for several engine workers.

A *prefix group* is a run of prompts (in token order) sharing more than the prefix every prompt
of the node shares — an AI join's anchor value and everything after the instruction that leads
to it. A group goes to one worker whole, so no worker recomputes another's shared prefix; only
a group heavier than a worker's fair share is split (one prefix recompute per extra piece).

Shards are cut on demand as workers free up (guided self-scheduling, Polychronopoulos & Kuck
1987): each shard weighs about what is left / (2 x workers), never less than one group and never
more prompts than a checkpoint. Big shards go first and small ones even out the tail, so a slow
or restarted worker delays the end by at most a small shard. The executor cuts real prompts with
`ShardCutter`; `explain` and benchmarks/scale_out.py run the same cutter in `simulate` on
estimated group weights (tokens), with workers of equal speed.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Sequence

if TYPE_CHECKING:
    from aisql.planner.statistics import TokenProfile

TAIL_FACTOR = 2  # a shard is about remaining / (TAIL_FACTOR x workers)


@dataclass(frozen=True)
class Group:
    """A prefix group (or a piece of a split one): its cost in tokens and prompts."""

    weight: float  # tokens the model computes for it: its own prefix-tree tokens + decoding
    prompts: int
    payload: Any = None  # what the executor ships (its prepared prompts); None in a simulation
    home: str | None = None  # the worker whose prefix cache holds this group's prefix, if any


def pieces(weight: float, fair_share: float) -> int:
    """Into how many pieces a group is split: 1 unless it outweighs a worker's fair share."""
    if fair_share <= 0 or weight <= fair_share:
        return 1
    return math.ceil(weight / fair_share)


def split_heavy(groups: Sequence[Group], workers: int) -> list[Group]:
    """Groups heavier than total / workers cut into even pieces of consecutive prompts (a
    payload — the executor's prepared prompts — is sliced with them; the home is kept)."""
    fair = sum(g.weight for g in groups) / max(1, workers)
    out: list[Group] = []
    for group in groups:
        n = min(pieces(group.weight, fair), max(1, group.prompts))
        if n == 1:
            out.append(group)
            continue
        base, extra = divmod(group.prompts, n)
        start = 0
        for i in range(n):
            size = base + (i < extra)
            payload = group.payload[start : start + size] if group.payload is not None else None
            out.append(Group(group.weight * size / group.prompts, size, payload, group.home))
            start += size
    return out


def split_count(groups: Sequence[Group], workers: int) -> int:
    """How many groups `split_heavy` cuts."""
    fair = sum(g.weight for g in groups) / max(1, workers)
    return sum(1 for g in groups if pieces(g.weight, fair) > 1 and g.prompts > 1)


class ShardCutter:
    """Hands out shards of consecutive groups, biggest first, as workers ask for them.

    A group may have a home: the worker whose prefix cache already holds its prefix (an earlier
    node's prompts on the same rows). A worker takes its own groups first, then groups without
    a home, and only then steals from the end of the longest queue of another's — so a prefix
    is computed again only when that evens out the tail."""

    def __init__(self, groups: Iterable[Group], workers: int, shard_prompts: int) -> None:
        self._queues: dict[str | None, deque[Group]] = {}
        for group in groups:
            self._queues.setdefault(group.home, deque()).append(group)
        self.workers = max(1, workers)
        self.shard_prompts = max(1, shard_prompts)
        self.remaining = sum(g.weight for q in self._queues.values() for g in q)

    def __bool__(self) -> bool:
        return any(self._queues.values())

    def next(self, worker: str | None = None) -> list[Group] | None:
        """The next shard for `worker` (None when every group is handed out)."""
        own = self._queues.get(worker)
        steal = False
        if own:
            queue = own
        elif self._queues.get(None):
            queue = self._queues[None]
        else:
            others = [q for q in self._queues.values() if q]
            if not others:
                return None
            queue = max(others, key=lambda q: sum(g.weight for g in q))
            steal = True  # from the end: the victim keeps the groups it will reach first
        take = queue.pop if steal else queue.popleft
        peek = (lambda: queue[-1]) if steal else (lambda: queue[0])
        target = self.remaining / (TAIL_FACTOR * self.workers)
        shard = [take()]
        weight, prompts = shard[0].weight, shard[0].prompts
        while queue and weight < target and prompts + peek().prompts <= self.shard_prompts:
            group = take()
            shard.append(group)
            weight += group.weight
            prompts += group.prompts
        if steal:
            shard.reverse()
        self.remaining -= weight
        return shard

    def add(self, group: Group) -> None:
        """A group read after the cutter was made (a streamed node's next slice): queued last."""
        self._queues.setdefault(group.home, deque()).append(group)
        self.remaining += group.weight

    def put_back(self, shard: Sequence[Group]) -> None:
        """A shard whose worker died: first in line again."""
        for group in reversed(shard):
            self._queues.setdefault(group.home, deque()).appendleft(group)
            self.remaining += group.weight


@dataclass
class ShardPlan:
    """A simulated run: which worker gets which shard, and when the last one ends."""

    workers: int
    groups: int  # prefix groups before splitting
    split_groups: int  # groups heavier than a fair share, split
    shard_prompts: list[int] = field(default_factory=list)
    shard_weights: list[float] = field(default_factory=list)
    worker_weight: list[float] = field(default_factory=list)
    worker_prompts: list[int] = field(default_factory=list)

    @property
    def total_weight(self) -> float:
        return sum(self.worker_weight)

    @property
    def makespan(self) -> float:
        """Tokens the busiest worker computes (time = makespan / one worker's token rate)."""
        return max(self.worker_weight, default=0.0)

    @property
    def balance(self) -> float:
        """Mean worker load / the busiest's: 1.0 is a perfect split."""
        return self.total_weight / (self.workers * self.makespan) if self.makespan else 1.0

    def to_dict(self) -> dict:
        sizes = sorted(self.shard_prompts)
        return {
            "workers": self.workers,
            "prefix_groups": self.groups,
            "split_groups": self.split_groups,
            "shards": len(sizes),
            "shard_prompts": {"min": sizes[0], "median": sizes[len(sizes) // 2], "max": sizes[-1]} if sizes else None,
            "worker_prompts": {"min": min(self.worker_prompts), "max": max(self.worker_prompts)} if self.worker_prompts else None,
            "total_tokens": round(self.total_weight),
            "makespan_tokens": round(self.makespan),
            "balance": round(self.balance, 4),
        }


def simulate(groups: Sequence[Group], workers: int, shard_prompts: int) -> ShardPlan:
    """Run the cutter against `workers` equally fast workers, each taking the next shard when it
    is free: the shard plan and its makespan, in tokens."""
    workers = max(1, workers)
    pieces_ = split_heavy(groups, workers)
    plan = ShardPlan(workers, len(groups), split_count(groups, workers))
    plan.worker_weight = [0.0] * workers
    plan.worker_prompts = [0] * workers
    cutter = ShardCutter(pieces_, workers, shard_prompts)
    free = [(0.0, w) for w in range(workers)]
    heapq.heapify(free)
    while cutter:
        shard = cutter.next()
        at, worker = heapq.heappop(free)
        weight = sum(g.weight for g in shard)
        prompts = sum(g.prompts for g in shard)
        plan.shard_prompts.append(prompts)
        plan.shard_weights.append(weight)
        plan.worker_weight[worker] += weight
        plan.worker_prompts[worker] += prompts
        heapq.heappush(free, (at + weight, worker))
    return plan


def estimated_groups(sizes: Sequence[int], tokens: "TokenProfile", factor: float = 1.0) -> list[Group]:
    """Prefix groups from DuckDB's distinct prompts per leading value (no prompt rendered): a
    group computes its leading value once and, per prompt, the rest of the prompt, the labels'
    tails and the decoded tokens. `factor`: the share of the input earlier AI filters leave."""
    lead = tokens.segments[0] if tokens.segments else 0.0
    per_prompt = sum(tokens.segments[1:]) + tokens.tail + tokens.label_tails + max(1.0, tokens.output_tokens)
    groups = []
    for size in sizes:
        prompts = max(1, round(size * factor))
        groups.append(Group(lead + prompts * per_prompt, prompts))
    return groups


def node_plan(groups: Sequence[Group], workers: int, shard_prompts: int, single_engine_s: float | None) -> dict:
    """`simulate` for explain: the plan's summary with its expected time and speedup, given the
    node's single-engine time estimate."""
    plan = simulate(groups, workers, shard_prompts)
    data = plan.to_dict()
    total = plan.total_weight
    data["speedup"] = round(total / plan.makespan, 3) if plan.makespan else None
    if single_engine_s is not None and total:
        data["expected_s"] = single_engine_s * plan.makespan / total
    return data
