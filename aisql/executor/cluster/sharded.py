"""Evaluate one node's prepared prompts on a pool of workers, shard by shard.

The prompts are cut into prefix groups (aisql.executor.cluster.shards) and handed out as shards
by the shard cutter (aisql.executor.cluster.shard_plan) whenever a worker frees up. Each shard's
answers are stored when they reach the driver — the checkpoint, as the single-engine chunks are
— so a crash loses only the shards in flight, and a worker's death only its own shard, which
goes back to the queue. The budget reserves a shard's prompts before it is handed out, so
shards in flight never add up past --max-prompts.
"""

from __future__ import annotations

from typing import Sequence

from aisql.executor.answers.answer_types import AnswerCounts, RunOptions
from aisql.executor.answers.checkpointed import Committed, ProgressLine, checkpoint_done, reporting
from aisql.executor.store.answer_store import Answer, AnswerStore, in_memory
from aisql.executor.cluster.engine import ClusterEngine
from aisql.executor.cluster.shard_plan import Group, ShardCutter
from aisql.executor.cluster.shards import prefix_groups
from aisql.executor.answers.request_kinds import Prepared
from aisql.functions import Task



class PoolShards:
    """A session's prompts answered on its worker pool, shard by shard (the `runner` the session
    gives its aisql.executor.answers.answering.Answering when it has a cluster)."""

    pooled = True

    def evaluate(self, answering, task: Task, items: Sequence[Prepared], *, key: str, known: dict[str, Answer], line: ProgressLine) -> AnswerCounts:
        with reporting(line, len(items)):
            with answering.lock:
                cluster = answering.engine()
            return evaluate_sharded(answering.store, answering.options, cluster, task, items, key=key, known=known, line=line)


def evaluate_sharded(
    store: AnswerStore, options: RunOptions, cluster: ClusterEngine, task: Task, items: Sequence[Prepared], *, key: str, known: dict[str, Answer], line: ProgressLine
) -> AnswerCounts:
    """Answers of `items` into `known` and the run's store; returns the counts (per worker too),
    which a budget stop carries."""
    counts = AnswerCounts()
    groups = prefix_groups(items, task, cluster.workers, cluster.ledger)
    cutter = ShardCutter(groups, cluster.workers, options.checkpoint_every)
    budget = ShardBudget(options.budget, cutter)

    def next_shard(worker: str):
        shard = budget.next(worker)
        return None if shard is None else (shard, [p for group in shard for p in group.payload])

    def on_result(shard, result, worker: str) -> None:
        store.put_many(key, result.answers)  # the checkpoint: this shard's answers are safe
        known.update(in_memory(task, result.answers))
        count = len(result.answers)
        batch = [p for group in shard for p in group.payload]
        counts.prompts_evaluated += count
        counts.prompts_truncated += sum(1 for p in batch if p.truncated)
        result.work.prefix_recompute_tokens = cluster.ledger.add(worker, [p.ids for p in batch])
        counts.work = counts.work + result.work
        cluster.absorb(result.work)
        budget.spent(count, result.busy_s)
        add_shard_counts(counts, worker, count, result)
        checkpoint_done(None, line, Committed(count, result.work.computed_tokens), result.busy_s)  # the budget: ShardBudget.spent

    cluster.pool.run_shards(task, next_shard, budget.put_back, on_result)
    budget.raise_if_stopped(counts)
    return counts


def add_shard_counts(counts: AnswerCounts, worker: str, prompts: int, result) -> None:
    """One shard's answers in the node's per-worker counts (shards, prompts, tokens, busy s)."""
    mine = counts.workers.setdefault(worker, {"shards": 0, "prompts": 0, "computed_tokens": 0, "busy_s": 0.0})
    mine["shards"] += 1
    mine["prompts"] += prompts
    mine["computed_tokens"] += result.work.computed_tokens
    mine["busy_s"] = round(mine["busy_s"] + result.busy_s, 4)


class ShardBudget:
    """--max-prompts with shards in flight: a shard's prompts are reserved before it is handed
    out, so shards in flight never add up past the budget; the last shard it allows is cut to
    its first prompts (the rest goes back to the cutter) and no shard follows it."""

    def __init__(self, budget, cutter: ShardCutter) -> None:
        self.budget = budget
        self.cutter = cutter
        self.reserved = 0  # prompts handed out and not yet answered
        self.stopped = False

    def next(self, worker: str) -> list[Group] | None:
        """The cutter's next shard for `worker` as the budget allows it: whole, cut, or None
        (none left, or the budget stopped the node)."""
        if self.stopped:
            return None
        shard = self.cutter.next(worker)
        if shard is None:
            return None
        if self.budget is None:
            return shard
        wanted = sum(g.prompts for g in shard)
        allowed = self.budget.allowed(self.reserved + wanted) - self.reserved
        if allowed <= 0:
            self.cutter.put_back(shard)
            self.stopped = True
            return None
        if allowed < wanted:  # the last shard the budget allows: its first prompts
            batch = [p for group in shard for p in group.payload]
            self.cutter.put_back([Group(float(wanted - allowed), wanted - allowed, batch[allowed:], shard[0].home)])
            shard = [Group(float(allowed), allowed, batch[:allowed], shard[0].home)]
            self.stopped = True
        self.reserved += sum(g.prompts for g in shard)
        return shard

    def put_back(self, shard: list[Group]) -> None:
        """A dead worker's shard: queued again, its reservation released."""
        self.cutter.put_back(shard)
        if self.budget is not None:
            self.reserved -= sum(g.prompts for g in shard)

    def spent(self, prompts: int, seconds: float) -> None:
        if self.budget is not None:
            self.budget.spend(prompts, seconds)
            self.reserved -= prompts

    def raise_if_stopped(self, counts: AnswerCounts) -> None:
        """The budget stopped the node with prompts left: the stop, carrying what was answered."""
        if self.stopped and self.cutter:
            stop = self.budget.stopped()
            stop.counts = counts
            raise stop
