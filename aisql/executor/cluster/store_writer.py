"""A streamed node's result cache, read and written by a process of its own.

Looking a text up in the SQLite cache and storing its answer cost the driver ~20 us of CPU
(SHA-256 of the text, a B-tree probe, JSON, an insert under a random key: a page touched per
answer) — as much as everything else the driver does for a prompt of a streamed node together,
and a single Python process has one core. So a streamed node hands its cache work to a store
process (its own connection to the same file, the same SqliteAnswerStore code):

- `lookup(texts)`: the process finds what is stored (as the task reads it: aisql.functions.Task.read) and answers
  with those; it keeps the entry keys of the others under consecutive ids — the driver counts
  the same ids — so their answers come back as (id, answer), never as texts again.
- `put(ids, answers)`: queued; the process commits whatever has queued in one transaction — a
  shard when it keeps up, several when it falls behind (group commit: fewer page writes per
  answer as the rate rises). Entries found unreadable are replaced.

What it keeps of the checkpoint promise: a shard's answers are in the process's queue the moment
they reach the driver, and it commits them even if the driver is killed (it drains its pipe to
the end before it exits). The driver waits for it (`flush`) before it reports a node done or
interrupted, so "N answers kept" counts commits. An error of the process (disk full, a
read-only file) is raised in the driver at its next call.

`InProcessStore` is the same interface over any AnswerStore, in the driver (no cache file).
"""

from __future__ import annotations

import pickle
import socket
import subprocess
import sys
from multiprocessing.connection import Connection
from typing import Sequence

from aisql.executor.store.answer_store import Answer, AnswerColumns, AnswerStore, reader_of
from aisql.executor.store.cache import CacheError, SqliteAnswerStore
from aisql.functions import Task

MAX_BATCH = 50_000  # answers per transaction at most (a writer far behind still commits often)


class InProcessStore:
    """The store process's interface over an AnswerStore in this process (by text)."""

    def __init__(self, store: AnswerStore, key: str, task: Task) -> None:
        self.store, self.key, self.task = store, key, task
        self._texts: dict[int, str] = {}  # id -> text, for texts not found
        self._next = 0

    def lookup(self, texts: Sequence[str]) -> tuple[int, dict[int, Answer]]:
        """(first, stored answers by position in `texts`): the others get ids first + position."""
        found = self.store.get_many(self.key, texts, reader_of(self.task))
        first, out = self._next, {}
        for i, text in enumerate(texts):
            if text in found:
                out[i] = found[text]
            else:
                self._texts[first + i] = text
        self._next += len(texts)
        return first, out

    def put(self, ids: Sequence[int], answers: AnswerColumns) -> None:
        self.store.put_many(self.key, dict(zip(map(self._texts.pop, ids), answers.answers())))

    def close(self) -> int:
        return 0  # committed at each put


def open_store_process(store: AnswerStore, key: str, task: Task) -> "StoreWriter | InProcessStore":
    """A store process for a cache file; for a store in memory (or a task that cannot be sent to
    another process), the same interface in this one."""
    if isinstance(store, SqliteAnswerStore):
        try:
            return StoreWriter(store, key, task)
        except (pickle.PicklingError, TypeError, AttributeError):
            pass
    return InProcessStore(store, key, task)


class StoreWriter:
    """The store process of one streamed node (its cache file, task key and task)."""

    def __init__(self, store: SqliteAnswerStore, key: str, task: Task) -> None:
        first = pickle.dumps(("task", key, task))  # before the process starts: a task that cannot travel stays here
        # A fresh interpreter (`python -m` this module) on one end of a socket pair: never a fork
        # of the driver (it holds Ray's and torch's threads), and never multiprocessing's spawn,
        # which re-runs the user's main script in the child.
        ours, theirs = socket.socketpair()
        self._process = subprocess.Popen(
            [sys.executable, "-m", "aisql.executor.cluster.store_writer", str(store.path), str(theirs.fileno())], pass_fds=(theirs.fileno(),)
        )
        theirs.close()
        self._pipe = Connection(ours.detach())
        self._store = store  # the driver's: told of unreadable entries (its warning, its counts)
        self._next = 0  # the id of the next text looked up
        self._pipe.send_bytes(first)
        self.sent = 0
        self.committed = 0

    def lookup(self, texts: Sequence[str]) -> tuple[int, dict[int, Answer]]:
        """(first, stored answers by position in `texts`): the others get ids first + position
        (the process numbers them alike)."""
        first = self._next
        self._next += len(texts)
        self._pipe.send(("get", list(texts)))
        message = self._receive("found")
        _, found, unreadable = message
        if unreadable:
            self._store.unreadable_entries += unreadable
            self._store.say_unreadable(unreadable)
        return first, {i: Answer(v, c, s, p) for i, v, c, s, p in found}

    def put(self, ids: Sequence[int], answers: AnswerColumns) -> None:
        """Queue answers for commit, by the ids `lookup` gave their texts."""
        self._check()
        self._pipe.send(("put", list(ids), answers))
        self.sent += len(answers)

    def flush(self) -> int:
        """Wait until everything sent is committed; the answers committed since the last flush."""
        self._pipe.send(("flush",))
        message = self._receive("flushed")
        before, self.committed = self.committed, message[1]
        return self.committed - before

    def close(self) -> int:
        """Flush, then stop the process; the answers committed since the last flush."""
        try:
            done = self.flush()
            self._pipe.send(("stop",))
        finally:
            self._pipe.close()
            try:
                self._process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._process.kill()
        return done

    def _receive(self, kind: str):
        while True:
            try:
                message = self._pipe.recv()
            except EOFError:
                raise CacheError("the result cache's store process ended before committing every answer") from None
            if message[0] == kind:
                return message
            self._raise(message)

    def _check(self) -> None:
        while self._pipe.poll():
            self._raise(self._pipe.recv())

    @staticmethod
    def _raise(message) -> None:
        if message[0] == "error":
            raise CacheError(message[1], hint=message[2])


def _serve(path: str, pipe) -> None:
    """The store process: drain the pipe, answer lookups, commit each batch of puts in one
    transaction, answer flushes. Ctrl-C and SIGTERM reach the whole process group: it ignores
    them and ends when the driver closes the pipe, having committed everything sent."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

    try:
        store = SqliteAnswerStore(path)
    except CacheError as err:
        pipe.send(("error", err.message, err.hint))
        return
    served = _Served(store)
    ended = False
    while not ended:
        try:
            messages = [pipe.recv()]
        except EOFError:  # the driver is gone: everything it sent was received, and is committed below
            break
        while pipe.poll() and sum(len(m[1]) for m in messages if m[0] == "put") < MAX_BATCH:
            try:
                messages.append(pipe.recv())
            except EOFError:
                ended = True
                break
        try:
            replies, stop = served.handle(messages)
        except CacheError as err:
            pipe.send(("error", err.message, err.hint))
            return
        ended = ended or stop
        for reply in replies:
            pipe.send(("flushed", served.committed) if reply is None else reply)
    store.close()


class _Served:
    """The store process's state between batches of messages: the task asked about, the keys of
    texts looked up and not found (their answers arrive as puts, by id), what was committed."""

    def __init__(self, store: SqliteAnswerStore) -> None:
        self.store = store
        self.key, self.read = "", None
        self.pending: dict[int, bytes] = {}  # id -> entry key of a text looked up and not found
        self.next_id = 0
        self.committed = 0

    def handle(self, messages: list) -> tuple[list, bool]:
        """One batch of messages: its puts committed in one transaction, its replies (None: a
        flush, answered with the count once committed), and whether a stop came."""
        from aisql.executor.store.cache import entry_key

        batch: list[tuple[bytes, Answer]] = []
        replies, stop = [], False
        for message in messages:
            kind = message[0]
            if kind == "put":
                batch += zip(map(self.pending.pop, message[1]), message[2].answers())
            elif kind == "get":
                keys = [entry_key(self.key, t) for t in message[1]]
                replies.append(self._found(keys))
            elif kind == "task":
                self.key, self.read = message[1], reader_of(message[2])
            elif kind == "flush":
                replies.append(None)  # answered once this batch is committed
            elif kind == "stop":
                stop = True
        if batch:
            self.store.put_by_keys(self.key, batch)
            self.committed += len(batch)
        return replies, stop

    def _found(self, keys: list[bytes]) -> tuple:
        before = self.store.unreadable_entries
        found = self.store.get_by_keys(keys, self.read, warn=False)
        for i, k in enumerate(keys):
            if i not in found:
                self.pending[self.next_id + i] = k
        self.next_id += len(keys)
        rows = [(i, a.value, a.cost, a.score, a.p_yes) for i, a in found.items()]
        return ("found", rows, self.store.unreadable_entries - before)


if __name__ == "__main__":
    _serve(sys.argv[1], Connection(int(sys.argv[2])))
