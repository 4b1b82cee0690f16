"""The one loop that pays for model work: chunk -> budget -> model -> commit -> progress.

Every caller that asks a model for many answers — a node's prompts on the local engine, an
embedding node's texts, the approximate mode's vectors, a selectivity sample — runs them through
`run_checkpointed`, so each behaves the same way under a kill, Ctrl-C or a budget:
- chunks hold about `checkpoint_seconds` of model time at the rate last measured on this model
  (aisql.executor.options.checkpoints.ChunkSizer), never more than `checkpoint_every` items;
- the budget is asked before each chunk, and the chunk cut to what it allows (none: the stop);
- the chunk's answers are committed before the next chunk starts: a stop loses at most the
  chunk in flight, and a rerun asks only for what is not committed;
- progress moves once per chunk.
A worker pool runs shards instead of chunks (aisql.executor.cluster.sharded); each shard's
result goes through the same commit step, `checkpoint_done`.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Callable, Generic, Sequence, TypeVar

from aisql.executor.options.budget import Budget
from aisql.executor.options.checkpoints import ChunkSizer
from aisql.executor.report.progress import NoProgress, Progress

Item = TypeVar("Item")
Result = TypeVar("Result")


@dataclass(frozen=True)
class Committed:
    """What a committed chunk answered: prompts (spent against the budget) and the tokens the
    model computed for them (progress)."""

    prompts: int
    tokens: int


@dataclass
class ProgressLine(Generic[Item]):
    """Where the loop reports: the run's progress, under a node's id and description, with
    the prompts already answered from the cache. `node_id` None: a loop without a line of its own."""

    progress: Progress
    node_id: str | None = None
    description: str = ""
    cached: int = 0

    @classmethod
    def silent(cls) -> "ProgressLine":
        return cls(NoProgress())


def run_checkpointed(
    items: Sequence[Item],
    answer: Callable[[Sequence[Item]], Result],
    commit: Callable[[Sequence[Item], Result], Committed],
    *,
    sizer: ChunkSizer,
    budget: Budget | None,
    line: ProgressLine,
    weight: Callable[[Item], int] = lambda item: 1,
    clock: Callable[[], float] = time.perf_counter,
) -> None:
    """Answer `items` in order, chunk by chunk (see the module docstring). `answer` is the paid
    part (its time is the model time the sizer and the budget read); `commit` stores a chunk's
    answers and says what it answered. `weight`: an item's size in the sizer's unit (prompt
    tokens; characters for an embedding model's texts)."""
    with reporting(line, len(items)):
        position = 0
        while position < len(items):
            size = sizer.next_size([weight(item) for item in items[position : position + sizer.chunk_prompts]])
            chunk = items[position : position + size]
            if budget is not None:
                chunk = chunk[: budget.allowed(len(chunk))]
                if not chunk:
                    raise budget.stopped()
            started = clock()
            result = answer(chunk)
            elapsed = clock() - started
            done = commit(chunk, result)  # the checkpoint: stored before the next chunk starts
            checkpoint_done(budget, line, done, elapsed)
            position += len(chunk)
            sizer.measured(sum(weight(item) for item in chunk), elapsed)


@contextlib.contextmanager
def reporting(line: ProgressLine, total: int):
    """The progress line of `total` new items, open while they are answered (chunks or shards)."""
    if line.node_id is None:
        yield
        return
    line.progress.start(line.node_id, line.description, total, line.cached)
    try:
        yield
    finally:
        line.progress.finish(line.node_id)


def checkpoint_done(budget: Budget | None, line: ProgressLine, done: Committed, seconds: float) -> None:
    """After a chunk's (or a shard's) answers are committed: the budget spent, progress moved."""
    if budget is not None:
        budget.spend(done.prompts, seconds)
    if line.node_id is not None:
        line.progress.advance(line.node_id, done.prompts, done.tokens)
