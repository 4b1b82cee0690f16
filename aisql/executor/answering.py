"""Evaluate prepared prompts in chunks, committing each chunk's answers before the next starts.

A crash or `kill -9` loses at most the chunk in flight: everything before it is in the answer
store, and a rerun asks the model only for what is not. A chunk ends after `checkpoint_every`
prompts or about `checkpoint_seconds` of model time (measured on the previous chunk), whichever
comes first. The budget is spent chunk by chunk, and progress is reported per chunk. The prefix
KV cache outlives a chunk, so chunking costs no prefix reuse.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from aisql.engine.base import Engine
from aisql.executor.answers import Answer, AnswerStore
from aisql.executor.budget import Budget
from aisql.executor.evaluate import Prepared, prepare, run
from aisql.executor.progress import NoProgress, Progress
from aisql.executor.run_stats import NodeStats
from aisql.executor import aggregate
from aisql.functions import Request, Task
from aisql.planner.approximation import Targets, call_targets


@dataclass
class RunOptions:
    """How a run evaluates prompts: checkpoints, context overflow, budget, progress."""

    checkpoint_every: int = 256  # commit answers after at most this many prompts...
    checkpoint_seconds: float = 10.0  # ...or about this much model time, whichever comes first
    on_overflow: str = "error"  # a prompt longer than the context: "error" | "truncate"
    budget: Budget | None = None
    progress: Progress = field(default_factory=NoProgress)
    approximate: "Targets | None" = None  # approximate mode for every AI.IF of the run (--approximate)
    embeddings: object | None = None  # the embedding model (a ModelSession): the cascade's proxy reads it

    def targets_for(self, call) -> "Targets | None":
        """The approximate-mode targets of a call: its own options, else the run's, else None (exact)."""
        return call_targets(call.function.approximates, call.hints, self.approximate)


def evaluate_checkpointed(
    engine: Callable[[], Engine],
    lock: threading.RLock,
    task: Task,
    items: Sequence[Prepared],
    *,
    store: AnswerStore,
    key: str,
    options: RunOptions,
    stats: NodeStats,
    progress: tuple[str, str, int],
    known: dict[str, Answer],
) -> None:
    """Answers of `items` (in their order) into `known` and `store`; counts into `stats`.
    `progress` is (node id, description, prompts already answered from the cache)."""
    node_id, description, cached = progress
    options.progress.start(node_id, description, len(items), cached)
    size = max(1, options.checkpoint_every)
    done = 0
    try:
        with lock:
            model = engine()
            if getattr(model, "pool", None) is not None:  # a ClusterEngine: shards over its workers
                from aisql.executor.sharded import evaluate_sharded

                evaluate_sharded(model, task, items, store=store, key=key, options=options, stats=stats, known=known, node_id=node_id)
                return
        while done < len(items):
            chunk = items[done : done + size]
            budget = options.budget
            if budget is not None:
                chunk = chunk[: budget.allowed(len(chunk))]
                if not chunk:
                    raise budget.stopped()
            with lock:
                model = engine()
                before = model.stats.copy()
                started = time.perf_counter()
                fresh = run(model, task, chunk)
                elapsed = time.perf_counter() - started
                delta = model.stats.since(before)
            stats.add_engine(delta)
            store.put_many(key, fresh)  # the checkpoint: committed before the next chunk
            known.update(fresh)
            stats.prompts_evaluated += len(fresh)
            stats.prompts_truncated += sum(1 for p in chunk if p.truncated)
            if budget is not None:
                budget.spend(len(fresh), elapsed)
            options.progress.advance(node_id, len(fresh), delta.computed_tokens)
            done += len(chunk)
            # Next chunk: about checkpoint_seconds of model time at this chunk's rate.
            rate = len(chunk) / max(elapsed, 1e-6)
            size = max(1, min(options.checkpoint_every, int(rate * options.checkpoint_seconds)))
    finally:
        options.progress.finish(node_id)


def answer_texts(
    counts: dict[str, int],
    task: Task,
    key: str,
    *,
    engine: Callable[[], Engine],
    lock: threading.RLock,
    store: AnswerStore,
    options: RunOptions,
    stats: NodeStats,
    seen: set[str],
    progress: tuple[str, str],
    group_by: Callable[[str], tuple] | None = None,
) -> dict[str, Answer]:
    """Answers for the distinct prompt texts of one task (`counts`: text -> rows asking it): the
    result cache first, the rest evaluated in prefix order (within `group_by` groups) with
    checkpoints. Counts prompts (total, new to this caller's `seen`, cached) and logical tokens
    into `stats`. Shared by planned AI nodes and the DuckDB functions of aisql.duckdb_functions.

    An aggregate task's texts are groups (JSON lists of values): each is reduced by map-reduce
    over GENERATE prompts answered through this same function (aisql.executor.aggregate)."""
    if task.request is Request.AGGREGATE:
        return _answer_groups(counts, task, key, engine=engine, lock=lock, store=store, options=options, stats=stats, seen=seen, progress=progress)
    stats.prompts_total += sum(counts.values())
    new = [t for t in counts if t not in seen]
    stats.prompts_unique += len(new)
    seen.update(new)
    known = store.get_many(key, list(counts))
    stats.prompts_cached += sum(1 for t in new if t in known)
    todo = [t for t in counts if t not in known]
    if todo:
        with lock:
            items = prepare(engine(), task, todo, group_by=group_by, on_overflow=options.on_overflow)
        evaluate_checkpointed(
            engine,
            lock,
            task,
            items,
            store=store,
            key=key,
            options=options,
            stats=stats,
            progress=(*progress, len(counts) - len(todo)),
            known=known,
        )
    for text, count in counts.items():
        stats.logical_tokens += count * known[text].cost
    return known


def _answer_groups(counts: dict[str, int], task: Task, key: str, *, engine, lock, store, options, stats, seen, progress) -> dict[str, Answer]:
    """Final answers of aggregate groups: the cache first; the rest reduced level by level, every
    map and reduce prompt answered (cached, checkpointed) like any GENERATE prompt."""
    known = store.get_many(key, list(counts))
    for text in counts:  # a cached group counts as one prompt answered from the cache
        if text in known:
            stats.prompts_total += 1
            stats.prompts_unique += text not in seen
            stats.prompts_cached += text not in seen
            seen.add(text)
    todo = [t for t in counts if t not in known]
    if not todo:
        return known
    fingerprint = key.rsplit("/", 1)[0]
    stage_seen: set[str] = set()

    def answer(stage: Task, stage_counts: dict[str, int]) -> dict[str, Answer]:
        return answer_texts(
            stage_counts, stage, stage.store_key(fingerprint), engine=engine, lock=lock, store=store,
            options=options, stats=stats, seen=stage_seen, progress=progress,
        )

    with lock:
        packer = aggregate.packer_for(engine(), task)
    finals, _ = aggregate.reduce_groups(todo, task, packer, answer)
    store.put_many(key, finals)
    known.update(finals)
    return known
