"""One AI node streamed through a worker pool: the driver's memory bounded by a slice.

The driver reads the node's input a slice at a time in anchor order (aisql.executor.cluster.
streamed_input), renders each distinct tuple's prompt, looks the slice up in the result cache
and queues what is left as prefix groups; workers pull shards as they free up (the same cutter
and pool as aisql.executor.sharded), apply the chat template, tokenize and answer them
(EngineWorker.run_texts). Each shard's answers are handed to the result cache's writer process
(aisql.executor.cluster.store_writer) when they reach the driver — the checkpoint — and kept for
the final query as digests (aisql.executor.answer_index), not texts.
The next slice is read only when the queue runs dry, so the driver holds one slice, the shards
in flight and ~28 bytes per answered prompt, whatever the node's size.

Deduplication is exact: a text already answered in this node (or in flight) is not sent again,
whichever slice it comes from. Prompt texts, result-cache keys and fingerprints are those of the
non-streamed path, so a rerun, a single-engine run and this one share answers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator

from aisql.executor.answer_index import AnswerIndex, digest
from aisql.executor.answer_store import Answer
from aisql.executor.cache import SqliteAnswerStore
from aisql.executor.cluster.engine import ClusterEngine
from aisql.executor.cluster.shard_plan import Group, ShardCutter
from aisql.executor.cluster.store_writer import StoreWriter
from aisql.executor.cluster.streamed_input import StreamedGroup
from aisql.executor.sharded import ShardBudget, add_shard_counts
from aisql.functions import Task

if TYPE_CHECKING:
    from aisql.executor.answering import AnswerCounts, Answering


def answer_streamed(
    answering: "Answering",
    cluster: Callable[[], ClusterEngine],
    task: Task,
    slices: Iterator[list[StreamedGroup]],
    *,
    key: str,
    node_id: str,
    index: AnswerIndex,
    on_answer: Callable[[Answer], None],
) -> "AnswerCounts":
    """Answers of every text the slices hold, into `index` and the store; the counts. `on_answer`
    sees each distinct text's answer once (cached or fresh): the node's confidence counts.
    `cluster` is asked for only when some text is not in the result cache (none: no worker starts)."""
    from aisql.executor.answering import AnswerCounts

    store, options, counts = answering.store, answering.options, AnswerCounts()
    cutter = ShardCutter([], 1, options.checkpoint_every)  # its worker count is set once the pool is up
    budget = ShardBudget(options.budget, cutter)
    waiting_rows: dict[bytes, int] = {}  # texts queued or in flight -> their input rows (logical tokens when answered)
    exhausted = False

    def record(keys: list[bytes], answers: list[Answer]) -> None:
        """Answers that arrived (from the cache or a worker): kept for the final query, their
        rows' logical tokens counted, each seen once by on_answer."""
        index.add_many(keys, [a.value for a in answers], [a.cost for a in answers])
        for k, answer in zip(keys, answers):
            counts.logical_tokens += waiting_rows.pop(k) * answer.cost
            on_answer(answer)

    def admit(groups: list[StreamedGroup]) -> None:
        """One slice: counted, looked up (this node, then the result cache), the rest queued."""
        keys = [[digest(t) for t in g.texts] for g in groups]
        flat = [k for ks in keys for k in ks]
        answered = dict(zip(flat, index.costs(flat)))
        fresh: dict[bytes, str] = {}
        for group, group_keys in zip(groups, keys):
            for text, k, rows in zip(group.texts, group_keys, group.rows):
                counts.prompts_total += rows
                if answered[k] is not None:
                    counts.logical_tokens += rows * answered[k]
                elif k in waiting_rows:
                    waiting_rows[k] += rows
                else:
                    waiting_rows[k] = rows
                    fresh[k] = text
        counts.prompts_unique += len(fresh)
        cached = store.get_many(key, list(fresh.values()), task.accepts)
        if cached:
            cached_keys = [k for k, t in fresh.items() if t in cached]
            record(cached_keys, [cached[fresh[k]] for k in cached_keys])
            counts.prompts_cached += len(cached_keys)
            options.progress.advance(node_id, len(cached_keys), 0)
        for group, group_keys in zip(groups, keys):
            payload = []
            for k in group_keys:
                text = fresh.pop(k, None)  # popped: a text two tuples render is queued once
                if text is not None and text not in cached:
                    payload.append((text, k))
            if payload:
                cutter.add(Group(group.weight * len(payload) / len(group.texts), len(payload), payload))

    def fill() -> None:
        """Read slices until some prompt is queued or the input is done."""
        nonlocal exhausted
        while not cutter and not exhausted:
            try:
                admit(next(slices))
            except StopIteration:
                exhausted = True

    def next_shard(worker: str):
        fill()
        shard = budget.next(worker)
        return None if shard is None else (shard, [text for group in shard for text, _ in group.payload])

    def on_result(shard, result, worker: str) -> None:
        pairs = [pair for group in shard for pair in group.payload]
        answers: list[Answer] = result.answers
        texts = [text for text, _ in pairs]
        if writer is not None:  # the checkpoint: committed by the writer process, even if this one dies
            writer.put(key, texts, answers, replace=store.unreadable_among(key, texts))
        else:
            store.put_many(key, dict(zip(texts, answers)))  # the checkpoint
        record([k for _, k in pairs], answers)
        counts.prompts_evaluated += len(answers)
        counts.prompts_truncated += result.truncated
        counts.work = counts.work + result.work
        engine.absorb(result.work)
        budget.spent(len(answers), result.busy_s)
        add_shard_counts(counts, worker, len(answers), result)
        options.progress.advance(node_id, len(answers), result.work.computed_tokens)

    fill()
    if not cutter:
        return counts  # every answer was in the result cache (or in this node already)
    engine = cluster()
    cutter.workers = engine.workers
    writer = StoreWriter(store.path) if isinstance(store, SqliteAnswerStore) else None
    try:
        engine.pool.run_shards(task, next_shard, budget.put_back, on_result, method="run_texts", extra=(options.on_overflow,))
    finally:
        if writer is not None:
            store.committed += writer.close()  # every answer received is committed before the node ends or stops
    if budget.stopped and (cutter or _has_more(slices)):
        stop = options.budget.stopped()
        stop.counts = counts
        raise stop
    return counts


def _has_more(slices: Iterator) -> bool:
    for _ in slices:
        return True
    return False
