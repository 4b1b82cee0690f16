"""The LLM's answering path: distinct prompt texts of a task -> answers, through the result cache
and the engine, committed in checkpoints (the embedding model's texts take their own path,
aisql.executor.node.embedding_runtime, through the same checkpoint loop).

`Answering` is built once per run and holds what every caller needs: the engine (loaded on first
need), the lock that keeps one engine call at a time, the answer store, the model's fingerprint
(the store key without loading the model) and the run's options. Planned nodes, naive rows,
selectivity samples, aggregates and the DuckDB functions of `aisql.register` all ask it; each call
returns its counts (`AnswerCounts`), which the caller adds to its own stats.

Checkpoints: a crash, `kill -9` or Ctrl-C loses at most the chunk in flight: everything before
it is in the answer store, and a rerun asks the model only for what is not. A chunk holds about
`checkpoint_seconds` of model time at the run's measured rate, and at most `checkpoint_every`
prompts; the run's first chunk is small, as nothing is measured yet (aisql.executor.options.checkpoints).
The budget is spent chunk by chunk, and progress is reported per chunk
(aisql.executor.answers.checkpointed). The prefix KV cache outlives a chunk, so chunking costs no
prefix reuse. A session with a worker pool answers shard by shard instead (its `runner`,
aisql.executor.cluster.sharded.PoolShards).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence, TypeVar

from aisql.engine.base import Engine, EngineStats
from aisql.executor.answers import aggregate
from aisql.executor.store.answer_store import Answer, AnswerStore, in_memory, reader_of
from aisql.executor.options.budget import BudgetExceeded
from aisql.executor.answers.answer_types import AnswerCounts, RunOptions
from aisql.executor.answers.checkpointed import Committed, ProgressLine, run_checkpointed
from aisql.executor.options.checkpoints import ChunkSizer
from aisql.executor.answers.evaluate import answer_prepared, prepare
from aisql.executor.answers.request_kinds import Prepared, kind_of
from aisql.functions import Task

T = TypeVar("T")


class PromptRunner(Protocol):
    """How a run's prepared prompts reach its model: `LocalChunks` here, or shards over a
    worker pool (aisql.executor.cluster.sharded.PoolShards) — chosen once per session."""

    pooled: bool  # a pool of workers answers (its large nodes stream)

    def evaluate(
        self, answering: "Answering", task: Task, items: Sequence[Prepared], *, key: str, known: dict[str, Answer], line: ProgressLine
    ) -> AnswerCounts: ...


class LocalChunks:
    """The engine in this process answers time-bounded chunks, each committed (the loop of
    aisql.executor.answers.checkpointed)."""

    pooled = False

    def evaluate(
        self, answering: "Answering", task: Task, items: Sequence[Prepared], *, key: str, known: dict[str, Answer], line: ProgressLine
    ) -> AnswerCounts:
        done = AnswerCounts()

        def commit(chunk: Sequence[Prepared], result: tuple[dict[str, Answer], EngineStats]) -> Committed:
            fresh, work = result
            done.work = done.work + work
            answering.store.put_many(key, fresh)
            known.update(in_memory(task, fresh))
            done.prompts_evaluated += len(fresh)
            done.prompts_truncated += sum(1 for p in chunk if p.truncated)
            return Committed(len(fresh), work.computed_tokens)

        try:
            run_checkpointed(
                items,
                lambda chunk: answering.measured(lambda engine: answer_prepared(engine, task, chunk)),
                commit,
                sizer=answering.chunks,
                budget=answering.options.budget,
                line=line,
                weight=lambda prepared: len(prepared.ids),
                clock=answering.clock,
            )
        except BudgetExceeded as stop:
            stop.counts = done + stop.counts
            raise
        return done


@dataclass
class Answering:
    """One run's way to answers (see the module docstring)."""

    engine: Callable[[], Engine]  # loaded on first need, so SQL errors surface before any model loads
    store: AnswerStore
    lock: threading.RLock = field(default_factory=threading.RLock)  # one engine call at a time
    fingerprint: Callable[[], str] = lambda: ""  # names the model in the store without loading it
    options: RunOptions = field(default_factory=RunOptions)
    clock: Callable[[], float] = time.perf_counter  # model time of a chunk (tests pass a clock of work done)
    reads_states: Callable[[], bool] = lambda: False  # the engine returns hidden states (a probe can be fitted: aisql.functions.probe)
    runner: "PromptRunner" = field(default_factory=lambda: LocalChunks())  # chosen once, when the session builds it
    chunks: ChunkSizer = field(init=False)  # the LLM's chunks (prompt tokens per second)
    embedding_chunks: ChunkSizer = field(init=False)  # the embedding model's (characters per second)
    # Per task: the prompt texts some node of this run asked already. Two identical calls in one
    # SELECT share it, so the run counts their prompts once as unique (and never as "cached").
    seen_by_task: dict[str, set[str]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.chunks = ChunkSizer(self.options.checkpoint_every, self.options.checkpoint_seconds)
        self.embedding_chunks = ChunkSizer(self.options.checkpoint_every, self.options.checkpoint_seconds)

    def pooled(self) -> bool:
        """The model runs on a pool of workers (large nodes stream: aisql.executor.cluster.streaming):
        read from the runner the session chose, not kept beside it."""
        return self.runner.pooled

    def seen(self, task: Task) -> set[str]:
        """The texts of `task` this run has asked (or looked up) so far, shared by its nodes."""
        return self.seen_by_task.setdefault(task.signature, set())

    def key(self, task: Task) -> str:
        """Where a task's answers live in the store: per model, per task."""
        return task.store_key(self.fingerprint())

    def measured(self, ask: Callable[[Engine], T]) -> tuple[T, EngineStats]:
        """`ask(engine)` under the lock: its result and the engine work it did."""
        with self.lock:
            model = self.engine()
            before = model.stats.copy()
            result = ask(model)
            return result, model.stats.since(before)

    # ---- distinct texts -> answers -------------------------------------------------------------
    def answer_texts(
        self,
        counts: dict[str, int],
        task: Task,
        *,
        seen: set[str],
        progress: tuple[str, str],
        group_by: Callable[[str], tuple] | None = None,
        key: str | None = None,
        fixed_text: str = "",
    ) -> tuple[dict[str, Answer], AnswerCounts]:
        """Answers for the distinct prompt texts of one task (`counts`: text -> rows asking it):
        the result cache first, the rest evaluated in prefix order (within `group_by` groups) with
        checkpoints; and the counts (texts new to the caller's `seen` count as unique).
        `progress` is (node id, description); `fixed_text` what every text holds whatever the row
        (aisql.executor.answers.evaluate.prepare: an overflow it causes is the call's).

        An aggregate task's texts are groups (JSON lists of values): each is reduced by map-reduce
        over GENERATE prompts answered through this same method (aisql.executor.answers.aggregate)."""
        key = key or self.key(task)
        if kind_of(task).groups:
            return self._answer_groups(counts, task, key, seen=seen, progress=progress)
        done = AnswerCounts(prompts_total=sum(counts.values()))
        new = [t for t in counts if t not in seen]
        done.prompts_unique = len(new)
        seen.update(new)
        known = self.store.get_many(key, list(counts), reader_of(task))
        done.prompts_cached = sum(1 for t in new if t in known)
        todo = [t for t in counts if t not in known]
        if todo:
            with self.lock:
                items = prepare(self.engine(), task, todo, group_by=group_by, on_overflow=self.options.on_overflow, fixed_text=fixed_text)
            try:
                done += self.evaluate_checkpointed(task, items, key=key, progress=(*progress, len(counts) - len(todo)), known=known)
            except BudgetExceeded as stop:
                stop.counts = done + stop.counts
                raise
        done.logical_tokens = sum(count * known[text].cost for text, count in counts.items())
        return known, done

    def evaluate_checkpointed(
        self, task: Task, items: Sequence[Prepared], *, key: str, progress: tuple[str, str, int], known: dict[str, Answer]
    ) -> AnswerCounts:
        """Answers of `items` (in their order) into `known` and the store, by the run's way of
        answering (`runner`: chunks on this engine, or shards on a worker pool). `progress` is
        (node id, description, prompts already answered from the cache). A budget stop carries
        the counts of what was answered before it."""
        node_id, description, cached = progress
        line = ProgressLine(self.options.progress, node_id, description, cached)
        return self.runner.evaluate(self, task, items, key=key, known=known, line=line)

    def _answer_groups(self, counts: dict[str, int], task: Task, key: str, *, seen: set[str], progress) -> tuple[dict[str, Answer], AnswerCounts]:
        """Final answers of aggregate groups: the cache first; the rest reduced level by level, every
        map and reduce prompt answered (cached, checkpointed) like any GENERATE prompt."""
        done = AnswerCounts()
        known = self.store.get_many(key, list(counts), reader_of(task))
        for text in counts:  # a cached group counts as one prompt answered from the cache
            if text in known:
                done.prompts_total += 1
                done.prompts_unique += text not in seen
                done.prompts_cached += text not in seen
                seen.add(text)
        todo = [t for t in counts if t not in known]
        if not todo:
            return known, done
        fingerprint = key.rsplit("/", 1)[0]
        stage_seen: set[str] = set()

        def answer(stage: Task, stage_counts: dict[str, int]) -> dict[str, Answer]:
            nonlocal done
            answers, stage_done = self.answer_texts(stage_counts, stage, seen=stage_seen, progress=progress, key=stage.store_key(fingerprint))
            done += stage_done
            return answers

        with self.lock:
            packer = aggregate.packer_for(self.engine(), task)
        finals, _ = aggregate.reduce_groups(todo, task, packer, answer)
        self.store.put_many(key, finals)
        known.update(finals)
        return known, done

