"""Prefix groups of one node's prepared prompts, and the token work of a set of prompts.

Prompts are put in token order (depth-first over their prefix tree) and cut wherever two
neighbours share no more than what every prompt shares (the instruction and framing): the runs
between cuts are the prefix groups (aisql.executor.cluster.shard_plan). The prefix-tree size of a
worker's prompts is what its engine computes for them; the sum over workers minus the tree of
all prompts is the prefix work a split costs (`PrefixLedger`).
"""

from __future__ import annotations

from typing import Sequence

from aisql.executor.answers.request_kinds import Prepared
from aisql.executor.answers.request_kinds import kind_of
from aisql.functions import Task
from aisql.executor.cluster.shard_plan import Group, split_heavy


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def output_tokens(task: Task) -> int:
    """Tokens decoded per prompt, for balancing: one step to score, up to max_tokens to generate."""
    return kind_of(task).decode_steps(task)


def prefix_groups(items: Sequence[Prepared], task: Task, workers: int, ledger: "PrefixLedger | None" = None) -> list[Group]:
    """`items` as prefix groups (payload: their prepared prompts), in token order, groups
    heavier than a worker's fair share split into pieces. With a `ledger`, a group's home is the
    worker whose cache holds more of its prefix than every prompt shares."""
    ordered = sorted(items, key=lambda p: p.ids)
    if not ordered:
        return []
    shared = min(common_prefix(a.ids, b.ids) for a, b in zip(ordered, ordered[1:])) if len(ordered) > 1 else len(ordered[0].ids)
    per_prompt = output_tokens(task)
    runs: list[list[Prepared]] = [[ordered[0]]]
    weights = [len(ordered[0].ids) - shared + per_prompt]
    for before, item in zip(ordered, ordered[1:]):
        overlap = common_prefix(before.ids, item.ids)
        if overlap <= shared:
            runs.append([])
            weights.append(0)
        runs[-1].append(item)
        weights[-1] += len(item.ids) - max(overlap, shared) + per_prompt
    whole = [
        Group(weight, len(run), run, ledger.holder(run[0].ids, shared) if ledger is not None else None)
        for run, weight in zip(runs, weights)
    ]
    return split_heavy(whole, workers)


class PrefixLedger:
    """The prompts each worker has run since its cache was last emptied, as sorted token
    sequences, next to all prompts together: adding a shard says how many prompt tokens its
    worker computes that some engine had computed already (a prefix split between workers).
    Exact while no cache evicts (the default KV budget holds a test's or benchmark's prompts)."""

    def __init__(self) -> None:
        from sortedcontainers import SortedList  # O(log n) inserts: a session may run millions of prompts

        self._new = SortedList
        self._workers: dict[str, SortedList] = {}
        self._all = SortedList()

    def add(self, worker: str, sequences: Sequence[Sequence[int]]) -> int:
        mine = self._workers.setdefault(worker, self._new())
        extra = 0
        for seq in map(tuple, sequences):
            extra += _insert(mine, seq) - _insert(self._all, seq)
        return extra

    def holder(self, seq: Sequence[int], beyond: int) -> str | None:
        """The worker whose cache shares the longest prefix with `seq`, if longer than `beyond`."""
        best, best_len = None, beyond
        seq = tuple(seq)
        for worker, ordered in self._workers.items():
            _, shared = _overlap(ordered, seq)
            if shared > best_len:
                best, best_len = worker, shared
        return best

    def forget(self, worker: str) -> None:
        """A worker died: its replacement starts with an empty cache."""
        self._workers.pop(worker, None)

    def clear(self) -> None:
        self._workers.clear()
        self._all.clear()


def _insert(ordered, seq: tuple[int, ...]) -> int:
    """Insert `seq` into the SortedList; the tokens it adds to their prefix tree."""
    at, shared = _overlap(ordered, seq)
    if at < len(ordered) and ordered[at] == seq:
        return 0
    ordered.add(seq)
    return len(seq) - shared


def _overlap(ordered, seq: tuple[int, ...]) -> tuple[int, int]:
    """Where `seq` sorts into `ordered` (a SortedList), and the longest prefix it shares with any
    member (one of its two neighbours there)."""
    at = ordered.bisect_left(seq)
    shared = max(
        common_prefix(ordered[at - 1], seq) if at > 0 else 0,
        common_prefix(ordered[at], seq) if at < len(ordered) else 0,
    )
    return at, shared
