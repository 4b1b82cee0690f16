"""The result cache's file: which file it is, whether aisql may open it, and opening it.

A SQLite file at the cache path is opened only if it is an aisql cache (APPLICATION_ID in its
header, or aisql's own tables from before the mark) or new: a user's own database given as
`--cache` is refused before SQLite touches it, as is a file whose log would be applied to it.
The tables are created in WAL mode, tuned for answers arriving in bulk.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Callable

from aisql.errors import AisqlError

SCHEMA_VERSION = 1
# SQLite's header field for "which application's file is this" (PRAGMA application_id): "aisq".
APPLICATION_ID = 0x61697371
OWN_TABLES = {"answers", "meta", "states"}  # states: since hidden states were kept (older caches lack it)
BUSY_TIMEOUT_S = 60.0
_SQLITE_MAGIC = b"SQLite format 3\x00"

CORRUPT_HINT = "move it aside or delete it (`aisql cache clear` cannot read it either), or run with --cache PATH / --no-cache"



class CacheError(AisqlError):
    """The result cache cannot be opened or used."""


def connect(path: Path, opened: Callable[[sqlite3.Connection, Path], None] | None = None) -> sqlite3.Connection:
    """Open (or create) the file at `path` as the result cache, refusing a file of another
    application and creating the tables of a new one. `opened`: how the connection is set up
    (`open_connection`; tests wrap it)."""
    db = None
    refuse_foreign_file(path)  # before SQLite opens it: opening can write a log left beside it into the file
    try:
        db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        retry_while_busy(lambda: (opened or open_connection)(db, path))
        return db
    except sqlite3.DatabaseError as err:
        if db is not None:
            db.close()
        if "malformed" in str(err):
            raise read_error(path, err) from None
        if isinstance(err, sqlite3.OperationalError):
            raise CacheError(f"cannot use the cache file {path}: {err}") from None
        raise CacheError(f"cache file {path} is not an aisql result cache ({err})", hint=CORRUPT_HINT) from None
    except BaseException:
        if db is not None:
            db.close()
        raise


def open_connection(db: sqlite3.Connection, path: Path) -> None:
    db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
    _refuse_foreign(db, path)  # before anything is written to the file
    if db.execute("PRAGMA application_id").fetchall()[0][0] != APPLICATION_ID:
        # Marked before the switch to WAL, so the mark is in the file's own header (a mark
        # only in the log would leave a crashed first run's file unrecognisable without it).
        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        if db.execute("PRAGMA journal_mode").fetchall()[0][0] == "wal":  # an older cache: its mark went to the log
            db.execute("PRAGMA wal_checkpoint(PASSIVE)")
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    # Answers arrive in bulk (a worker pool's shards: millions a node) under random keys, so
    # each commit touches a page per answer: a 64 MB page cache and a WAL checkpointed every
    # ~40 MB instead of ~4 MB write each hot page fewer times (measured: 22.6 -> 15.8 us of
    # CPU per answer in 256-answer commits, 24.8 -> 13.3 in 1,000-answer ones).
    db.execute("PRAGMA cache_size = -65536")
    db.execute("PRAGMA wal_autocheckpoint = 10000")
    _init_schema(db, path)

def refuse_foreign_file(path: Path) -> None:
    """Is the file at the path one aisql may open? Read from its own header, without SQLite:
    opening a database applies the write-ahead log (or rolls back the journal) found beside
    its path, whichever file that log belonged to — a cache replaced by the user's own
    database while a run went on once had the old cache's log written into it. A file marked
    as an aisql cache (APPLICATION_ID in its header) or a new one is opened; an unmarked one
    only with no log or journal beside it (then `_refuse_foreign` reads its tables)."""
    try:
        with open(path, "rb") as file:
            header = file.read(100)
    except FileNotFoundError:
        return
    except OSError as err:
        raise CacheError(f"cannot read the cache file {path}: {err.strerror or err}") from None
    if not header:
        return  # empty: a new cache
    if len(header) < 100 or not header.startswith(_SQLITE_MAGIC):
        raise CacheError(f"cache file {path} is not an aisql result cache (file is not a database)", hint=CORRUPT_HINT)
    application = int.from_bytes(header[68:72], "big")
    if application == APPLICATION_ID:
        return
    if application != 0:
        raise _foreign(path, f"application id {application:#x}")
    for suffix in ("-wal", "-journal"):
        beside = Path(f"{path}{suffix}")
        try:
            pending = beside.stat().st_size > 0
        except OSError:
            continue
        if pending:
            raise CacheError(
                f"{path} is not marked as an aisql result cache and a {'write-ahead log' if suffix == '-wal' else 'rollback journal'} "
                f"lies beside it ({beside.name}); opening it would write that into the file, so aisql will not",
                hint="if it is another application's database, give --cache a new file name; if it is an aisql cache of an "
                "older version, open it once with the sqlite3 shell (which applies the log), then run again",
            )

def _foreign(path: Path, what: str) -> CacheError:
    return CacheError(
        f"{path} is a SQLite database of another application ({what}), not an aisql result cache; aisql will not add its tables to it",
        hint="give --cache a new file name (e.g. answers.sqlite), or leave it out for the default cache",
    )

def _refuse_foreign(db: sqlite3.Connection, path: Path) -> None:
    """A SQLite database of another application is never adopted: `--cache app.sqlite` once
    added aisql's tables to a user's own database (and `aisql cache clear` then worked on it).
    An aisql cache carries APPLICATION_ID; one written before it did has only aisql's tables."""
    application = db.execute("PRAGMA application_id").fetchall()[0][0]
    if application == APPLICATION_ID:
        return
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    older_cache = {"answers", "meta"} <= tables <= OWN_TABLES and bool(db.execute("SELECT 1 FROM meta WHERE name = 'schema_version'").fetchall())
    if application == 0 and (not tables or older_cache):
        return  # a new file, or an aisql cache from before the mark: marked in _init_schema
    what = f"tables: {', '.join(sorted(tables)[:5])}{', ...' if len(tables) > 5 else ''}" if tables else f"application id {application:#x}"
    raise _foreign(path, what)

def retry_while_busy(action) -> None:
    """Switching a new file to WAL and creating its tables take locks that SQLite does not
    always wait for (it answers "database is locked" at once): retry, boundedly."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    delay = 0.005
    while True:
        try:
            return action()
        except sqlite3.OperationalError as err:
            busy = "locked" in str(err) or "busy" in str(err)
            if not busy or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

def _init_schema(db: sqlite3.Connection, path: Path) -> None:
    db.execute(
        """CREATE TABLE IF NOT EXISTS answers (
               key BLOB PRIMARY KEY,
               task TEXT NOT NULL,
               value TEXT NOT NULL,
               created REAL NOT NULL
           ) WITHOUT ROWID"""
    )
    db.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT)")
    # Hidden states (aisql.functions.hidden_states: ~1-3 KB each) beside their answers, in a
    # rowid table: in the WITHOUT ROWID answers table a value that large spills onto overflow
    # pages (measured 4.9 KB of file per answer, against 1.3 KB here).
    db.execute("CREATE TABLE IF NOT EXISTS states (key BLOB PRIMARY KEY, state BLOB NOT NULL)")
    db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
    if db.execute("PRAGMA application_id").fetchall()[0][0] != APPLICATION_ID:
        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    version = db.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchall()[0][0]
    if int(version) != SCHEMA_VERSION:
        raise CacheError(f"cache file {path} has schema version {version}, this aisql reads {SCHEMA_VERSION}")


def read_error(path: Path, err: sqlite3.DatabaseError) -> CacheError:
    if isinstance(err, sqlite3.OperationalError) and "malformed" not in str(err):
        return CacheError(f"cannot read the result cache {path}: {err}")
    return CacheError(f"the result cache {path} is damaged ({err})", hint=CORRUPT_HINT)


def refuse_unwritable(path: Path) -> None:
    """The cache writes its file and, beside it, SQLite's log and shared-memory files: a
    read-only file or directory is said as such, with what to do — not as SQLite's "unable to
    open database file" after the run has started."""
    directory = path.parent
    if not os.access(directory, os.W_OK | os.X_OK):
        raise CacheError(
            f"cannot write the result cache in {directory}: the directory is read-only",
            hint="give --cache a path in a directory you can write, or run with --no-cache",
        )
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise CacheError(
            f"cannot write the result cache file {path}: it is read-only",
            hint="make it writable, give --cache another file, or run with --no-cache",
        )


def file_identity(path: Path) -> tuple[int, int] | None:
    """Which file `path` names now (device, inode); None when there is none."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino
