"""A streamed node's answers written to the result cache by a process of its own.

Storing an answer in the SQLite cache costs the driver ~15 us of CPU (JSON, SHA-256, a B-tree
insert under a random key: a page touched per answer) — as much as everything else the driver
does for a prompt of a streamed node together, and a single Python process has one core. So a
streamed node hands each shard's answers to a writer process (spawned, its own connection to
the same file, the same SqliteAnswerStore code) and goes on; the writer commits whatever has
queued in one transaction — a shard when it keeps up, several when it falls behind (group
commit: fewer page writes per answer as the rate rises).

What it keeps of the checkpoint promise: a shard's answers are in the writer's queue the moment
they reach the driver, and the writer commits them even if the driver is killed (it drains its
pipe to the end before it exits). The driver waits for the writer (`flush`) before it reports a
node done or interrupted, so "N answers kept" counts commits. An error of the writer (disk
full, a read-only file) is raised in the driver at its next put or flush.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from multiprocessing.connection import Connection
from typing import Sequence

from aisql.executor.answer_store import Answer
from aisql.executor.cache import CacheError

MAX_BATCH = 50_000  # answers per transaction at most (a writer far behind still commits often)


class StoreWriter:
    def __init__(self, path: str) -> None:
        # A fresh interpreter (`python -m` this module) on one end of a socket pair: never a fork
        # of the driver (it holds Ray's and torch's threads), and never multiprocessing's spawn,
        # which re-runs the user's main script in the child.
        ours, theirs = socket.socketpair()
        self._process = subprocess.Popen(
            [sys.executable, "-m", "aisql.executor.cluster.store_writer", str(path), str(theirs.fileno())], pass_fds=(theirs.fileno(),)
        )
        theirs.close()
        self._pipe = Connection(ours.detach())
        self.sent = 0
        self.committed = 0

    def put(self, task: str, texts: Sequence[str], answers: Sequence[Answer], replace: Sequence[str] = ()) -> None:
        """Queue answers for commit (`replace`: texts whose stored entries were unreadable)."""
        self._check()
        rows = [(t, a.value, a.cost, a.score, a.p_yes) for t, a in zip(texts, answers)]
        self._pipe.send(("put", task, rows, list(replace)))
        self.sent += len(rows)

    def flush(self) -> int:
        """Wait until everything sent is committed; the answers committed since the last flush."""
        self._pipe.send(("flush",))
        while True:
            try:
                message = self._pipe.recv()
            except EOFError:
                raise CacheError("the result cache's writer process ended before committing every answer") from None
            if message[0] == "flushed":
                before, self.committed = self.committed, message[1]
                return self.committed - before
            self._raise(message)

    def close(self) -> int:
        """Flush, then stop the writer; the answers committed since the last flush."""
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

    def _check(self) -> None:
        while self._pipe.poll():
            self._raise(self._pipe.recv())

    @staticmethod
    def _raise(message) -> None:
        if message[0] == "error":
            raise CacheError(message[1], hint=message[2])


def _write_loop(path: str, pipe) -> None:
    """The writer process: drain the pipe, commit each batch in one transaction, answer flushes.
    Ctrl-C and SIGTERM reach the whole process group: the writer ignores them and ends when the
    driver closes the pipe, having committed everything sent."""
    import signal

    from aisql.executor.cache import SqliteAnswerStore

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

    try:
        store = SqliteAnswerStore(path)
    except CacheError as err:
        pipe.send(("error", err.message, err.hint))
        return
    committed = 0
    ended = False
    while not ended:
        try:
            messages = [pipe.recv()]
        except EOFError:  # the driver is gone: everything it sent was received, and is committed below
            break
        while pipe.poll() and sum(len(m[2]) for m in messages if m[0] == "put") < MAX_BATCH:
            try:
                messages.append(pipe.recv())
            except EOFError:
                ended = True
                break
        batches: dict[str, dict[str, Answer]] = {}
        replacing: dict[str, list[str]] = {}
        for message in messages:
            if message[0] == "put":
                _, task, rows, replace = message
                batches.setdefault(task, {}).update((t, Answer(v, c, s, p)) for t, v, c, s, p in rows)
                replacing.setdefault(task, []).extend(replace)
        try:
            for task, answers in batches.items():
                store.replace_unreadable(task, replacing.get(task, ()))
                store.put_many(task, answers)
                committed += len(answers)
        except CacheError as err:
            pipe.send(("error", err.message, err.hint))
            return
        for message in messages:
            if message[0] == "flush":
                pipe.send(("flushed", committed))
            elif message[0] == "stop":
                ended = True
    store.close()


if __name__ == "__main__":
    _write_loop(sys.argv[1], Connection(int(sys.argv[2])))
