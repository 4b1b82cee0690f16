"""One AI node streamed through a worker pool: the driver's memory bounded by a slice.

The driver reads the node's input a slice at a time in anchor order (aisql.executor.cluster.
streamed_input), renders each distinct tuple's prompt, has the slice looked up in the result
cache by the node's store process (aisql.executor.cluster.store_writer) and queues what is left
as prefix groups; workers pull shards as they free up (the same cutter and pool as
aisql.executor.cluster.sharded), apply the chat template, tokenize and answer them
(EngineWorker.run_texts). Each shard's answers are handed to the store process when they reach
the driver — the checkpoint — and kept for the final query by text digest and by tuple hash
(aisql.executor.store.answer_index), not as texts or tuples.
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

from aisql.executor.store.answer_index import AnswerIndex, digest
from aisql.executor.answers.answer_types import AnswerCounts
from aisql.executor.store.answer_store import AnswerColumns
from aisql.executor.cluster.engine import ClusterEngine
from aisql.executor.cluster.shard_plan import Group, ShardCutter
from aisql.executor.cluster.store_writer import open_store_process
from aisql.executor.cluster.streamed_input import StreamedGroup
from aisql.executor.cluster.sharded import ShardBudget, add_shard_counts
from aisql.functions import Task

if TYPE_CHECKING:
    from aisql.executor.answers.answering import Answering


class StreamedNode:
    """One node's streamed answering: its queue of prefix groups (`cutter`), the texts waiting
    for answers (queued or in flight, with their rows and tuple hashes), its counts. Slices are
    admitted as the pool asks for work (`next_shard`), shards' answers recorded as they return
    (`on_result`, the checkpoint). `run(cluster)` answers every text the slices hold, into `index`
    and the store, and returns the counts; `on_answers` sees each distinct text's answer once
    (cached or fresh); `cluster` is asked for only when some text is not in the result cache."""

    def __init__(
        self,
        answering: "Answering",
        task: Task,
        slices: Iterator[list[StreamedGroup]],
        *,
        key: str,
        node_id: str,
        index: AnswerIndex,
        on_answers: Callable[[AnswerColumns], None],
    ) -> None:
        self.store, self.options = answering.store, answering.options
        self.task, self.slices, self.key, self.node_id = task, slices, key, node_id
        self.index, self.on_answers = index, on_answers
        self.counts = AnswerCounts()
        self.cutter = ShardCutter([], 1, self.options.checkpoint_every)  # its worker count is set once the pool is up
        self.budget = ShardBudget(self.options.budget, self.cutter)
        self.waiting_rows: dict[bytes, int] = {}  # texts queued or in flight -> their input rows (logical tokens when answered)
        self.waiting_tuples: dict[bytes, list[int]] = {}  # texts queued or in flight -> their tuples' hashes (the final query's keys)
        self.exhausted = False
        self.cache = None  # the node's store process, while it runs
        self.engine: ClusterEngine | None = None  # the pool, once some text needs the model

    def run(self, cluster: Callable[[], ClusterEngine]) -> AnswerCounts:
        self.cache = open_store_process(self.store, self.key, self.task)
        with _collections_skip_what_exists():
            try:
                self.fill()
                if self.cutter:  # else every answer was in the result cache (or in this node already): no worker starts
                    self.engine = cluster()
                    self.cutter.workers = self.engine.workers
                    self.engine.pool.run_shards(
                        self.task, self.next_shard, self.budget.put_back, self.on_result, method="run_texts", extra=(self.options.on_overflow,)
                    )
            except BaseException:
                with contextlib.suppress(Exception):  # the error that stopped the node is the one to tell
                    self.store.committed += self.cache.close()  # every answer received is committed before the node stops
                raise
            self.store.committed += self.cache.close()  # ... or ends
        if self.budget.stopped and (self.cutter or _has_more(self.slices)):
            stop = self.options.budget.stopped()
            stop.counts = self.counts
            raise stop
        return self.counts

    def record(self, keys: list[bytes], answers: AnswerColumns) -> None:
        """Answers that arrived (from the cache or a worker): kept for the final query (by text
        and by the tuples waiting on them), their rows' logical tokens counted, each seen once
        by on_answers. Per answer only C-level loops (map, zip): millions of them a node."""
        costs = answers.costs
        codes = self.index.add_new(keys, answers.values, costs)  # each text is asked once
        self.counts.logical_tokens += sum(map(operator.mul, map(self.waiting_rows.pop, keys), costs))
        tuples = list(map(self.waiting_tuples.pop, keys, repeat((), len(keys))))
        if all(len(t) == 1 for t in tuples):  # a tuple per text: the usual case
            self.index.add_tuples([t[0] for t in tuples], codes)
        else:
            self.index.add_tuples(list(chain.from_iterable(tuples)), [c for c, t in zip(codes, tuples) for _ in t])
        self.on_answers(answers)

    def admit_all_new(self, groups: list[StreamedGroup], flat: list[bytes], rows: list[int], hashed: bool) -> dict[bytes, str]:
        """admit's path when every text of the slice is new to the node and once in the slice (the
        usual case): waiting, with no loop in Python; the fresh texts by digest."""
        self.waiting_rows.update(zip(flat, rows))
        self.waiting_tuples.update(zip(flat, ([h] for g in groups for h in g.hashes)) if hashed else ())
        return dict(zip(flat, (t for g in groups for t in g.texts)))

    def admit_each(self, groups: list[StreamedGroup], flat: list[bytes], rows: list[int], entries: list) -> dict[bytes, str]:
        """admit's text-by-text path (a text answered or queued before, or twice in the slice):
        the fresh texts by digest."""
        fresh: dict[bytes, str] = {}
        known_hashes: list[int] = []  # tuples whose text this node has answered already
        known_codes: list[int] = []
        texts = (t for g in groups for t in g.texts)
        hashes = (h for g in groups for h in (g.hashes or [None] * len(g.texts)))
        for text, k, count, tuple_hash, entry in zip(texts, flat, rows, hashes, entries):
            if entry is not None:
                self.counts.logical_tokens += count * entry[1]
                if tuple_hash is not None:
                    known_hashes.append(tuple_hash)
                    known_codes.append(entry[0])
                continue
            if k in self.waiting_rows:
                self.waiting_rows[k] += count
            else:
                self.waiting_rows[k] = count
                self.waiting_tuples[k] = []
                fresh[k] = text
            if tuple_hash is not None:
                self.waiting_tuples[k].append(tuple_hash)
        self.index.add_tuples(known_hashes, known_codes)
        return fresh

    def admit(self, groups: list[StreamedGroup]) -> None:
        """One slice: counted, looked up (this node, then the result cache), the rest queued."""
        keys = [list(map(digest, g.texts)) for g in groups]
        flat = [k for ks in keys for k in ks]
        rows = [r for g in groups for r in g.rows]
        self.counts.prompts_total += sum(rows)
        hashed = all(g.hashes is not None for g in groups)
        if not hashed:  # tuples not read with their hashes: the final query renders
            self.index.tuples_collided = True
        entries = self.index.entries(flat)
        all_new = not any(entries) and len(set(flat)) == len(flat) and self.waiting_rows.keys().isdisjoint(flat)
        fresh = self.admit_all_new(groups, flat, rows, hashed) if all_new else self.admit_each(groups, flat, rows, entries)
        self.counts.prompts_unique += len(fresh)
        fresh_keys, fresh_texts = list(fresh), list(fresh.values())
        first_id, cached = self.cache.lookup(fresh_texts)  # by position; the others are known to the cache by first_id + position
        if cached:
            self.record([fresh_keys[i] for i in cached], AnswerColumns.of(list(cached.values())))
            self.counts.prompts_cached += len(cached)
            self.options.progress.advance(self.node_id, len(cached), 0)
        if all_new and not cached:  # each group's texts are queued as they are, ids in slice order
            for group, group_keys in zip(groups, keys):
                ids = range(first_id, first_id + len(group_keys))
                first_id += len(group_keys)
                self.cutter.add(Group(group.weight, len(group_keys), list(zip(group.texts, group_keys, ids))))
            return
        self._queue(groups, keys, {k: (text, k, first_id + i) for i, (k, text) in enumerate(zip(fresh_keys, fresh_texts)) if i not in cached})

    def _queue(self, groups: list[StreamedGroup], keys: list[list[bytes]], queued: dict[bytes, tuple]) -> None:
        """The slice's texts not answered from the cache, queued by group, each text once."""
        for group, group_keys in zip(groups, keys):
            payload = []
            for k in group_keys:
                item = queued.pop(k, None)  # popped: a text two tuples render is queued once
                if item is not None:
                    payload.append(item)
            if payload:
                self.cutter.add(Group(group.weight * len(payload) / len(group.texts), len(payload), payload))

    def fill(self) -> None:
        """Read slices until some prompt is queued or the input is done."""
        while not self.cutter and not self.exhausted:
            try:
                self.admit(next(self.slices))
            except StopIteration:
                self.exhausted = True

    def next_shard(self, worker: str):
        self.fill()
        shard = self.budget.next(worker)
        return None if shard is None else (shard, [item[0] for group in shard for item in group.payload])

    def on_result(self, shard, result, worker: str) -> None:
        answers: AnswerColumns = result.answers
        items = [item for group in shard for item in group.payload]  # (text, digest, cache id)
        self.cache.put([i for _, _, i in items], answers)  # the checkpoint: committed by the store process, even if this one dies
        self.record([k for _, k, _ in items], answers)
        counts = self.counts
        counts.prompts_evaluated += len(answers)
        counts.prompts_truncated += result.truncated
        counts.work = counts.work + result.work
        self.engine.absorb(result.work)
        self.budget.spent(len(answers), result.busy_s)
        add_shard_counts(counts, worker, len(answers), result)
        self.options.progress.advance(self.node_id, len(answers), result.work.computed_tokens)


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
