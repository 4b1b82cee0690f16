"""The persistent result cache: answers already paid for, kept across runs and processes.

SQLite in WAL mode, the embedded database built for this: any number of processes read while one
writes, writers queue on a lock (`busy_timeout`), and a committed transaction survives `kill -9`
and power loss. The key hashes (model fingerprint — weights, tokenizer, quantization —, task —
function, instruction, labels, options —, rendered prompt): a changed model or question is never
answered from the cache. Answers are deterministic, so two processes computing the same prompt
write the same row: `INSERT OR IGNORE` keeps the first.

An entry that cannot be read back (edited by hand, a torn disk page: not JSON, a missing field,
a value the asking task never answers with) is a miss: the prompt is asked again, the entry
replaced, and the run says how many were.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from pathlib import Path
import warnings
from typing import Callable, Iterable

from aisql.errors import AisqlWarning
from aisql.executor.store.cache_file import (  # noqa: F401 - CacheError and the marks: where callers read them
    APPLICATION_ID,
    CORRUPT_HINT,
    OWN_TABLES,
    SCHEMA_VERSION,
    CacheError,
    connect,
    file_identity,
    open_connection,
    read_error,
    refuse_unwritable,
)
from aisql.executor.store.answer_store import Answer, AnswerStore, MemoryAnswerStore, Reader
from aisql.functions.hidden_states import valid_state
from aisql.paths import cache_root

_LOOKUP_CHUNK = 500


def default_cache_path() -> Path:
    return cache_root() / "answers.sqlite"


def open_answer_store(cache: bool | str | os.PathLike | None, warn: Callable[[str], None] | None = None) -> AnswerStore:
    """True: the default result cache; a path: that file; False/None: memory, for this process only.
    `warn` hears about unreadable entries (default: a Python warning)."""
    if cache is None or cache is False:
        return MemoryAnswerStore()
    return SqliteAnswerStore(default_cache_path() if cache is True else cache, warn=warn)


class SqliteAnswerStore:
    def __init__(self, path: str | os.PathLike, *, warn: Callable[[str], None] | None = None) -> None:
        self.path = Path(path).expanduser()
        self._warn = warn
        self._unreadable: set[bytes] = set()  # keys of entries that could not be read: replaced when answered again
        self.unreadable_entries = 0  # how many were met, over this store's life
        self.committed = 0  # answers this process committed (what Ctrl-C keeps)
        if self.path.is_dir():
            raise CacheError(f"cache path {self.path} is a directory", hint="give a file name, e.g. answers.sqlite")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise CacheError(f"cannot create the cache directory {self.path.parent}: {err.strerror or err}") from None
        refuse_unwritable(self.path)
        self._lock = threading.Lock()
        self._db = self._connect()

    def _connect(self) -> sqlite3.Connection:
        """Open the file (aisql.executor.store.cache_file) and remember which file it is."""
        db = connect(self.path, self._open)
        self._identity = file_identity(self.path)
        self._log_identity = file_identity(self._log_path)
        return db

    @staticmethod
    def _open(db: sqlite3.Connection, path: Path) -> None:
        """How a connection is set up (tests wrap it to act between the opening and the run)."""
        open_connection(db, path)

    def _read_error(self, err: sqlite3.DatabaseError) -> CacheError:
        return read_error(self.path, err)

    # ---- the AnswerStore interface -------------------------------------------------------------
    def get_many(self, task: str, texts: Iterable[str], read: Reader | None = None) -> dict[str, Answer]:
        texts = list(dict.fromkeys(texts))
        found = self.get_by_keys([entry_key(task, t) for t in texts], read)
        return {texts[i]: answer for i, answer in found.items()}

    def get_by_keys(self, keys: list[bytes], read: Reader | None = None, *, warn: bool = True) -> dict[int, Answer]:
        """The stored answers of `keys` (entry keys, `entry_key`), by position in `keys`, each as
        `read` makes it (aisql.functions.Task.read). An entry that is unreadable or that `read`
        refuses is left out, remembered (the next put replaces it) and counted in
        `unreadable_entries`; `warn`: say so. An older entry `read` finds stale is left out and
        replaced too, without a word (it is not damaged)."""
        position = {key: i for i, key in enumerate(keys)}
        found: dict[int, Answer] = {}
        unreadable: list[bytes] = []
        stale: list[bytes] = []
        with self._lock:
            try:
                with_states = bool(self._db.execute("SELECT 1 FROM states LIMIT 1").fetchall())
                for start in range(0, len(keys), _LOOKUP_CHUNK):
                    chunk = keys[start : start + _LOOKUP_CHUNK]
                    marks = ",".join("?" * len(chunk))
                    rows = self._db.execute(f"SELECT key, value FROM answers WHERE key IN ({marks})", chunk).fetchall()
                    states = dict(self._db.execute(f"SELECT key, state FROM states WHERE key IN ({marks})", chunk).fetchall()) if with_states else {}
                    for key, value in rows:
                        state = states.get(key)
                        key = bytes(key)
                        answer = _decode(value, None if state is None else bytes(state))
                        if answer is not None and read is not None:
                            answer = _read(read, answer)
                        if answer is None:
                            unreadable.append(key)
                        elif not isinstance(answer, Answer):
                            stale.append(key)
                        elif key in position:
                            found[position[key]] = answer
            except sqlite3.DatabaseError as err:
                raise self._read_error(err) from None
            self._unreadable.update(unreadable)
            self._unreadable.update(stale)
        if unreadable:
            self.unreadable_entries += len(unreadable)
            if warn:
                self.say_unreadable(len(unreadable))
        return found

    def say_unreadable(self, count: int) -> None:
        self._say(
            f"warning: {count:,} cached answers in {self.path} could not be read (edited or corrupt): "
            "asked the model again, and replaced"
        )

    def _say(self, message: str) -> None:
        if self._warn is not None:
            self._warn(message)
        else:
            warnings.warn(message.removeprefix("warning: "), AisqlWarning, stacklevel=3)

    def put_many(self, task: str, answers: dict[str, Answer]) -> None:
        """Commit `answers` in one transaction: after it returns they survive a crash."""
        self.put_by_keys(task, [(entry_key(task, text), answer) for text, answer in answers.items()])

    def put_by_keys(self, task: str, answers: list[tuple[bytes, Answer]]) -> None:
        """put_many by entry keys (`entry_key`)."""
        if not answers:
            return
        now = time.time()
        rows = [(key, task, _encode(answer), now) for key, answer in answers]
        states = [(key, answer.state) for key, answer in answers if answer.state is not None]
        with self._lock:
            self._follow_the_file()
            replacing = [row for row in rows if row[0] in self._unreadable]  # entries found unreadable (or stale: a state now kept)
            replacing_states = [row for row in states if row[0] in self._unreadable]
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    self._db.executemany("INSERT OR IGNORE INTO answers VALUES (?, ?, ?, ?)", rows)
                    if states:
                        self._db.executemany("INSERT OR IGNORE INTO states VALUES (?, ?)", states)
                    if replacing:
                        self._db.executemany("INSERT OR REPLACE INTO answers VALUES (?, ?, ?, ?)", replacing)
                    if replacing_states:
                        self._db.executemany("INSERT OR REPLACE INTO states VALUES (?, ?)", replacing_states)
                    self._db.execute("COMMIT")
                    self._log_identity = self._log_identity or file_identity(self._log_path)
                    self._unreadable.difference_update(row[0] for row in replacing)
                except BaseException:
                    if self._db.in_transaction:
                        self._db.execute("ROLLBACK")
                    else:  # Ctrl-C landed after the COMMIT: the answers are kept, and counted
                        self.committed += len(rows)
                    raise
                self.committed += len(rows)
            except sqlite3.Error as err:  # disk full, read-only file, lock held for over a minute
                raise CacheError(
                    f"cannot write {len(rows)} answers to the result cache {self.path}: {err}",
                    hint="the answers committed before are kept; free disk space, or run with --no-cache",
                ) from None

    def _follow_the_file(self) -> None:
        """Before a commit: is the cache still the file opened? A file deleted (or replaced) while a
        run goes on once took every later answer into an unlinked inode — the run said "N
        evaluated", the rerun paid again. Now the cache is opened afresh at its path (a new file,
        or the one that replaced it if it is an aisql cache), saying what went with the old one;
        a foreign file there stops the run (CacheError) with nothing more lost."""
        if file_identity(self.path) == self._identity:
            return
        vanished = not self.path.exists()
        lost = self.committed
        self._db.close()
        moved = self._move_old_log_aside()
        try:
            self._db = self._connect()
        except CacheError as err:
            self._db = sqlite3.connect(":memory:", check_same_thread=False)  # for close(); every later commit fails the same way
            aside = f" (its write-ahead log, which SQLite would have applied to the new file, is now {moved.name})" if moved else ""
            raise CacheError(
                f"the result cache {self.path} was {'deleted' if vanished else 'replaced'} during the run and cannot be opened again: {err.message}",
                hint=f"{lost:,} answers this run committed went with the old file{aside}; {err.hint or 'run with --cache PATH or --no-cache'}",
            ) from None
        self.committed = 0
        self._unreadable.clear()
        self._say(
            f"warning: the result cache {self.path} was {'deleted' if vanished else 'replaced by another file'} during the run; "
            f"{lost:,} answers this run had committed went with the old file. "
            f"{'A new cache was created there' if vanished else 'The new file is used'}: the answers from now on are kept in it"
        )

    @property
    def _log_path(self) -> Path:
        return Path(f"{self.path}-wal")

    def _move_old_log_aside(self) -> Path | None:
        """The old cache's write-ahead log stays at the path when its file is moved away (SQLite
        will not checkpoint into a file that moved), and whatever file is at the path next would
        have it applied on its next open — by aisql or by its own application. The log this store
        wrote (the same file, by inode) is renamed aside; anyone else's is left alone."""
        if self._log_identity is None or file_identity(self._log_path) != self._log_identity:
            return None
        aside = self._log_path.with_name(f"{self._log_path.name}.orphaned-{os.getpid()}")
        try:
            os.replace(self._log_path, aside)
        except OSError:
            return None
        return aside

    # ---- maintenance ------------------------------------------------------------------------
    def stats(self) -> dict:
        with self._lock:
            try:
                entries = self._db.execute("SELECT count(*) FROM answers").fetchall()[0][0]
                tasks = self._db.execute("SELECT count(DISTINCT task) FROM answers").fetchall()[0][0]
                oldest, newest = self._db.execute("SELECT min(created), max(created) FROM answers").fetchall()[0]
            except sqlite3.DatabaseError as err:
                raise self._read_error(err) from None
        size = sum(p.stat().st_size for p in self.path.parent.glob(self.path.name + "*") if p.is_file())
        return {"path": str(self.path), "entries": entries, "tasks": tasks, "bytes": size, "oldest": oldest, "newest": newest}

    def clear(self) -> int:
        try:
            with self._lock:
                removed = self._db.execute("SELECT count(*) FROM answers").fetchall()[0][0]
                self._db.execute("DELETE FROM answers")
                self._db.execute("DELETE FROM states")
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._db.execute("VACUUM")
        except sqlite3.DatabaseError as err:
            raise self._read_error(err) from None
        return removed

    def integrity(self) -> str:
        with self._lock:
            try:
                return self._db.execute("PRAGMA integrity_check").fetchall()[0][0]
            except sqlite3.DatabaseError as err:
                raise self._read_error(err) from None

    def close(self) -> None:
        with self._lock:
            self._db.close()
            if file_identity(self.path) != self._identity:  # moved away since: its log must not meet the next file
                self._move_old_log_aside()

def entry_key(task: str, text: str) -> bytes:
    """The key of a text's entry under a task key."""
    return hashlib.sha256(task.encode() + b"\x1f" + text.encode()).digest()




def _encode(answer: Answer) -> str:
    """The answer's entry (its hidden state goes to the states table, as bytes)."""
    data = {"v": answer.value, "c": answer.cost, "s": answer.score}
    if answer.p_yes is not None:
        data["p"] = answer.p_yes
    if answer.logprobs is not None:
        data["l"] = list(answer.logprobs)
    return json.dumps(data)


_FIELDS = ({"v", "c", "s"}, {"v", "c", "s", "p"}, {"v", "c", "s", "l"}, {"v", "c", "s", "p", "l"})


def _decode(value, state: bytes | None = None) -> Answer | None:
    """The answer an entry holds (with its stored state), or None when it is not one `_encode`
    writes or its state is not one aisql keeps."""
    try:
        data = json.loads(value)
    except (TypeError, ValueError, RecursionError):  # not JSON, not text, nested past the parser
        return None
    if not isinstance(data, dict) or data.keys() not in _FIELDS:
        return None
    if state is not None and not valid_state(state):
        return None
    cost, score, p_yes, logprobs = data["c"], data["s"], data.get("p"), data.get("l")
    if type(cost) is not int or cost < 0:
        return None
    if score is not None and (type(score) not in (int, float) or not 0.0 <= score <= 1.0):
        return None
    if p_yes is not None and (type(p_yes) not in (int, float) or not 0.0 <= p_yes <= 1.0):
        return None
    if logprobs is not None:
        if not isinstance(logprobs, list) or not logprobs or not all(type(lp) in (int, float) and lp <= 1e-3 for lp in logprobs):
            return None
        logprobs = tuple(float(lp) for lp in logprobs)
    return Answer(value=data["v"], cost=cost, score=score, p_yes=p_yes, logprobs=logprobs, state=state)


def _read(read: Reader, answer: Answer):
    """`read(answer)`; None (unreadable) where a hand-edited value breaks the reader."""
    try:
        return read(answer)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError, RecursionError):
        return None
