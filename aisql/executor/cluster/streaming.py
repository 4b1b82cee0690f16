"""One AI node streamed through a worker pool: the driver's memory bounded by a slice.

The driver reads the node's input a slice at a time in anchor order (aisql.executor.cluster.
streamed_input), renders each distinct tuple's prompt, has the slice looked up in the result
cache by the node's store process (aisql.executor.cluster.store_writer) and queues what is left
as prefix groups; workers pull shards as they free up (the same cutter and pool as
aisql.executor.sharded), apply the chat template, tokenize and answer them
(EngineWorker.run_texts). Each shard's answers are handed to the store process when they reach
the driver — the checkpoint — and kept for the final query by text digest and by tuple hash
(aisql.executor.answer_index), not as texts or tuples.
The next slice is read only when the queue runs dry, so the driver holds one slice, the shards
in flight and ~40 bytes per answered prompt, whatever the node's size.

Deduplication is exact: a text already answered in this node (or in flight) is not sent again,
whichever slice it comes from. Prompt texts, result-cache keys and fingerprints are those of the
non-streamed path, so a rerun, a single-engine run and this one share answers.
"""

from __future__ import annotations

import contextlib
import gc
import operator
from itertools import chain, repeat
from typing import TYPE_CHECKING, Callable, Iterator

from aisql.executor.answer_index import AnswerIndex, digest
from aisql.executor.answer_types import AnswerCounts
from aisql.executor.answer_store import AnswerColumns
from aisql.executor.cluster.engine import ClusterEngine
from aisql.executor.cluster.shard_plan import Group, ShardCutter
from aisql.executor.cluster.store_writer import open_store_process
from aisql.executor.cluster.streamed_input import StreamedGroup
from aisql.executor.sharded import ShardBudget, add_shard_counts
from aisql.functions import Task

if TYPE_CHECKING:
    from aisql.executor.answering import Answering


def answer_streamed(
    answering: "Answering",
    cluster: Callable[[], ClusterEngine],
    task: Task,
    slices: Iterator[list[StreamedGroup]],
    *,
    key: str,
    node_id: str,
    index: AnswerIndex,
    on_answers: Callable[[AnswerColumns], None],
) -> AnswerCounts:
    """Answers of every text the slices hold, into `index` and the store; the counts. `on_answers`
    sees each distinct text's answer once (cached or fresh): the node's confidence counts.
    `cluster` is asked for only when some text is not in the result cache (none: no worker starts)."""
    store, options, counts = answering.store, answering.options, AnswerCounts()
    cutter = ShardCutter([], 1, options.checkpoint_every)  # its worker count is set once the pool is up
    budget = ShardBudget(options.budget, cutter)
    waiting_rows: dict[bytes, int] = {}  # texts queued or in flight -> their input rows (logical tokens when answered)
    waiting_tuples: dict[bytes, list[int]] = {}  # texts queued or in flight -> their tuples' hashes (the final query's keys)
    exhausted = False

    def record(keys: list[bytes], answers: AnswerColumns) -> None:
        """Answers that arrived (from the cache or a worker): kept for the final query (by text
        and by the tuples waiting on them), their rows' logical tokens counted, each seen once
        by on_answers. Per answer only C-level loops (map, zip): millions of them a node."""
        costs = answers.costs
        codes = index.add_new(keys, answers.values, costs)  # each text is asked once
        counts.logical_tokens += sum(map(operator.mul, map(waiting_rows.pop, keys), costs))
        tuples = list(map(waiting_tuples.pop, keys, repeat((), len(keys))))
        if all(len(t) == 1 for t in tuples):  # a tuple per text: the usual case
            index.add_tuples([t[0] for t in tuples], codes)
        else:
            index.add_tuples(list(chain.from_iterable(tuples)), [c for c, t in zip(codes, tuples) for _ in t])
        on_answers(answers)

    def admit_each(groups: list[StreamedGroup], flat: list[bytes], rows: list[int], entries: list) -> dict[bytes, str]:
        """admit's text-by-text path (a text answered or queued before, or twice in the slice):
        the fresh texts by digest."""
        fresh: dict[bytes, str] = {}
        known_hashes: list[int] = []  # tuples whose text this node has answered already
        known_codes: list[int] = []
        texts = (t for g in groups for t in g.texts)
        hashes = (h for g in groups for h in (g.hashes or [None] * len(g.texts)))
        for text, k, count, tuple_hash, entry in zip(texts, flat, rows, hashes, entries):
            if entry is not None:
                counts.logical_tokens += count * entry[1]
                if tuple_hash is not None:
                    known_hashes.append(tuple_hash)
                    known_codes.append(entry[0])
                continue
            if k in waiting_rows:
                waiting_rows[k] += count
            else:
                waiting_rows[k] = count
                waiting_tuples[k] = []
                fresh[k] = text
            if tuple_hash is not None:
                waiting_tuples[k].append(tuple_hash)
        index.add_tuples(known_hashes, known_codes)
        return fresh

    def admit(groups: list[StreamedGroup]) -> None:
        """One slice: counted, looked up (this node, then the result cache), the rest queued."""
        keys = [list(map(digest, g.texts)) for g in groups]
        flat = [k for ks in keys for k in ks]
        rows = [r for g in groups for r in g.rows]
        counts.prompts_total += sum(rows)
        hashed = all(g.hashes is not None for g in groups)
        if not hashed:  # tuples not read with their hashes: the final query renders
            index.tuples_collided = True
        entries = index.entries(flat)
        all_new = not any(entries) and len(set(flat)) == len(flat) and waiting_rows.keys().isdisjoint(flat)
        if all_new:
            # every text new to the node and once in the slice (the usual case): no loop in Python
            waiting_rows.update(zip(flat, rows))
            waiting_tuples.update(zip(flat, ([h] for g in groups for h in g.hashes)) if hashed else ())
            fresh = dict(zip(flat, (t for g in groups for t in g.texts)))
        else:
            fresh = admit_each(groups, flat, rows, entries)
        counts.prompts_unique += len(fresh)
        fresh_keys, fresh_texts = list(fresh), list(fresh.values())
        first_id, cached = cache.lookup(fresh_texts)  # by position; the others are known to the cache by first_id + position
        if cached:
            record([fresh_keys[i] for i in cached], AnswerColumns.of(list(cached.values())))
            counts.prompts_cached += len(cached)
            options.progress.advance(node_id, len(cached), 0)
        if all_new and not cached:  # each group's texts are queued as they are, ids in slice order
            for group, group_keys in zip(groups, keys):
                ids = range(first_id, first_id + len(group_keys))
                first_id += len(group_keys)
                cutter.add(Group(group.weight, len(group_keys), list(zip(group.texts, group_keys, ids))))
            return
        queued = {k: (text, k, first_id + i) for i, (k, text) in enumerate(zip(fresh_keys, fresh_texts)) if i not in cached}
        for group, group_keys in zip(groups, keys):
            payload = []
            for k in group_keys:
                item = queued.pop(k, None)  # popped: a text two tuples render is queued once
                if item is not None:
                    payload.append(item)
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
        return None if shard is None else (shard, [item[0] for group in shard for item in group.payload])

    def on_result(shard, result, worker: str) -> None:
        answers: AnswerColumns = result.answers
        items = [item for group in shard for item in group.payload]  # (text, digest, cache id)
        cache.put([i for _, _, i in items], answers)  # the checkpoint: committed by the store process, even if this one dies
        record([k for _, k, _ in items], answers)
        counts.prompts_evaluated += len(answers)
        counts.prompts_truncated += result.truncated
        counts.work = counts.work + result.work
        engine.absorb(result.work)
        budget.spent(len(answers), result.busy_s)
        add_shard_counts(counts, worker, len(answers), result)
        options.progress.advance(node_id, len(answers), result.work.computed_tokens)

    cache = open_store_process(store, key, task)
    with _collections_skip_what_exists():
        try:
            fill()
            if cutter:  # else every answer was in the result cache (or in this node already): no worker starts
                engine = cluster()
                cutter.workers = engine.workers
                engine.pool.run_shards(task, next_shard, budget.put_back, on_result, method="run_texts", extra=(options.on_overflow,))
        except BaseException:
            with contextlib.suppress(Exception):  # the error that stopped the node is the one to tell
                store.committed += cache.close()  # every answer received is committed before the node stops
            raise
        store.committed += cache.close()  # ... or ends
    if budget.stopped and (cutter or _has_more(slices)):
        stop = options.budget.stopped()
        stop.counts = counts
        raise stop
    return counts


@contextlib.contextmanager
def _collections_skip_what_exists():
    """Python's cyclic garbage collector, while a node streams, leaves alone the objects that
    existed before it (gc.freeze; unfrozen after). The loop allocates millions of small objects,
    each full collection they trigger would walk every object of the process — Ray's, torch's,
    the user's, ~400,000 and up — and measured, that was a quarter of the driver's CPU per
    prompt. Nothing is leaked: what existed is collectable again once the node ends. A caller
    that froze objects itself is left as it was."""
    if gc.get_freeze_count() or not gc.isenabled():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _has_more(slices: Iterator) -> bool:
    for _ in slices:
        return True
    return False
