"""Evaluate one node's prepared prompts on a pool of workers, shard by shard.

The prompts are cut into prefix groups (aisql.executor.cluster.shards) and handed out as shards
by the shard cutter (aisql.executor.cluster.shard_plan) whenever a worker frees up. Each shard's
answers are stored when they reach the driver — the checkpoint, as the single-engine chunks are
— so a crash loses only the shards in flight, and a worker's death only its own shard, which
goes back to the queue. The budget reserves a shard's prompts before it is handed out, so
shards in flight never add up past --max-prompts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from aisql.executor.answer_store import Answer
from aisql.executor.cluster.engine import ClusterEngine
from aisql.executor.cluster.shard_plan import Group, ShardCutter
from aisql.executor.cluster.shards import prefix_groups
from aisql.executor.evaluate import Prepared
from aisql.functions import Task

if TYPE_CHECKING:
    from aisql.executor.answering import AnswerCounts, Answering


def evaluate_sharded(
    answering: "Answering", cluster: ClusterEngine, task: Task, items: Sequence[Prepared], *, key: str, known: dict[str, Answer], node_id: str
) -> "AnswerCounts":
    """Answers of `items` into `known` and the run's store; returns the counts (per worker too),
    which a budget stop carries."""
    from aisql.executor.answering import AnswerCounts

    store, options, counts = answering.store, answering.options, AnswerCounts()
    groups = prefix_groups(items, task, cluster.workers, cluster.ledger)
    cutter = ShardCutter(groups, cluster.workers, options.checkpoint_every)
    budget = options.budget
    reserved = 0  # prompts handed out and not yet answered
    stopped = False

    def next_shard(worker: str):
        nonlocal reserved, stopped
        if stopped:
            return None
        shard = cutter.next(worker)
        if shard is None:
            return None
        batch = [p for group in shard for p in group.payload]
        if budget is not None:
            allowed = budget.allowed(reserved + len(batch)) - reserved
            if allowed <= 0:
                cutter.put_back(shard)
                stopped = True
                return None
            if allowed < len(batch):  # the last shard the budget allows: its first prompts
                rest = batch[allowed:]
                cutter.put_back([Group(float(len(rest)), len(rest), rest, shard[0].home)])
                batch = batch[:allowed]
                shard = [Group(float(len(batch)), len(batch), batch, shard[0].home)]
                stopped = True
            reserved += len(batch)
        return shard, batch

    def put_back(shard) -> None:
        nonlocal reserved
        cutter.put_back(shard)
        if budget is not None:
            reserved -= sum(g.prompts for g in shard)

    def on_result(shard, result, worker: str) -> None:
        nonlocal reserved
        store.put_many(key, result.answers)  # the checkpoint: this shard's answers are safe
        known.update(result.answers)
        count = len(result.answers)
        batch = [p for group in shard for p in group.payload]
        counts.prompts_evaluated += count
        counts.prompts_truncated += sum(1 for p in batch if p.truncated)
        result.work.prefix_recompute_tokens = cluster.ledger.add(worker, [p.ids for p in batch])
        counts.work = counts.work + result.work
        cluster.absorb(result.work)
        if budget is not None:
            budget.spend(count, result.busy_s)
            reserved -= count
        mine = counts.workers.setdefault(worker, {"shards": 0, "prompts": 0, "computed_tokens": 0, "busy_s": 0.0})
        mine["shards"] += 1
        mine["prompts"] += count
        mine["computed_tokens"] += result.work.computed_tokens
        mine["busy_s"] = round(mine["busy_s"] + result.busy_s, 4)
        options.progress.advance(node_id, count, result.work.computed_tokens)

    cluster.pool.run_shards(task, next_shard, put_back, on_result)
    if stopped and cutter:
        stop = budget.stopped()
        stop.counts = counts
        raise stop
    return counts
