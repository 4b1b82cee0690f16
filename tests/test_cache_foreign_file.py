"""The result cache never writes into a file it did not create (issue 58): a user's own SQLite
database moved onto the cache's path — before the run's first commit, between commits, during a
checkpoint, with the old cache's write-ahead log still beside the path — is byte-identical
afterwards, opens as the user's database, and no log is left beside it for its own application to
apply. The run stops with one clear error; answers it committed before stay with the old cache."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from conftest import EXAMPLES, load_example_tables

from aisql.api import Connection
from aisql.executor.store import cache as cache_module
from aisql.executor.store.answer_store import Answer
from aisql.executor.store.cache import CacheError, SqliteAnswerStore

QUERY = "SELECT id FROM reviews WHERE AI.IF(PROMPT('{review} is positive (review {id})'))"  # a prompt per row: many commits


def users_database(path: Path) -> str:
    """A user's own database (rollback journal, as most applications leave theirs); its digest."""
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        db.executemany("INSERT INTO users VALUES (?, ?)", [(i, f"user {i} " * 30) for i in range(300)])
    db.close()
    return digest(path)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_untouched(path: Path, expected: str) -> None:
    assert digest(path) == expected, "the user's database was written to"
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0, "a log lies beside it for its application to apply"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        assert db.execute("SELECT count(*) FROM users").fetchall() == [(300,)]
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


def test_a_foreign_database_moved_over_the_cache_with_its_log_open_elsewhere(tmp_path: Path):
    """The reported case: another connection (a second reader) keeps the old cache's log beside the
    path, so closing this store does not remove it; opening the new file would apply it."""
    path = tmp_path / "answers.sqlite"
    store = SqliteAnswerStore(path, warn=lambda message: None)
    store.put_many("t", {f"q{i}": Answer(True, 1) for i in range(64)})
    reader = sqlite3.connect(path)
    reader.execute("SELECT count(*) FROM answers").fetchall()
    assert Path(f"{path}-wal").stat().st_size > 0
    expected = users_database(tmp_path / "app.db")
    (tmp_path / "app.db").replace(path)
    with pytest.raises(CacheError, match="was replaced during the run and cannot be opened again") as raised:
        store.put_many("t", {"late": Answer(True, 1)})
    assert "not an aisql result cache" in raised.value.message and "64 answers this run committed" in raised.value.hint
    store.close()
    reader.close()
    assert_untouched(path, expected)


def test_an_unmarked_database_with_a_log_beside_it_is_never_opened(tmp_path: Path):
    """Between runs: a leftover log (a crashed run's) beside a database aisql did not mark."""
    path = tmp_path / "answers.sqlite"
    expected = users_database(path)
    Path(f"{path}-wal").write_bytes(b"\x37\x7f\x06\x82" + b"\x00" * 60)  # a log's header
    with pytest.raises(CacheError, match="not marked as an aisql result cache and a write-ahead log lies beside it"):
        SqliteAnswerStore(path)
    assert digest(path) == expected


def test_a_new_cache_is_marked_in_its_own_header(tmp_path: Path):
    """The mark is in the file, not only in its log: a first run killed before any checkpoint
    leaves a file the next run recognises."""
    path = tmp_path / "answers.sqlite"
    store = SqliteAnswerStore(path)
    store.put_many("t", {"a": Answer(True, 1)})
    assert int.from_bytes(path.read_bytes()[68:72], "big") == cache_module.APPLICATION_ID
    again = SqliteAnswerStore(path)  # while the first still holds its log
    assert again.get_many("t", ["a"]) == {"a": Answer(True, 1)}
    again.close()
    store.close()


class SwappingEngine:
    """The tiny engine; moves the user's database onto the cache path once `when(store)` holds
    at a scoring call."""

    def __init__(self, engine, path: Path, source: Path, when) -> None:
        self._engine, self._path, self._source, self._when = engine, path, source, when
        self.store = None
        self.swapped = False

    def score(self, requests, **kwargs):
        if not self.swapped and self._when(self.store):
            self._source.replace(self._path)
            self.swapped = True
        return self._engine.score(requests, **kwargs)

    def __getattr__(self, name):
        return getattr(self._engine, name)


def run_with_swap(tmp_path: Path, tiny_engine, when) -> tuple[Path, str, Connection]:
    path = tmp_path / "answers.sqlite"
    source = tmp_path / "app.db"
    expected = users_database(source)
    engine = SwappingEngine(tiny_engine, path, source, when)
    con = Connection(model="tiny", engine=engine, cache=path, warn=lambda message: None)
    load_example_tables(con)
    con.add_file_search_path([EXAMPLES])
    engine.store = con.store
    with pytest.raises(CacheError, match="was replaced during the run and cannot be opened again"):
        con.run(QUERY, checkpoint_every=8)
    assert engine.swapped
    con.close()
    return path, expected, con


@pytest.mark.parametrize(
    ("point", "when"),
    [("before the first commit", lambda store: store.committed == 0), ("between commits", lambda store: store.committed >= 16)],
)
def test_a_run_never_writes_into_a_database_moved_onto_its_cache(tmp_path: Path, tiny_engine, point, when):
    path, expected, _ = run_with_swap(tmp_path, tiny_engine, when)
    assert_untouched(path, expected)


def test_a_database_moved_onto_the_cache_during_a_checkpoint(tmp_path: Path, tiny_engine, monkeypatch):
    """The swap lands inside a commit whose log is checkpointed into the database file (a log of
    one page: every commit checkpoints), after the store checked which file it holds."""
    path = tmp_path / "answers.sqlite"
    source = tmp_path / "app.db"
    expected = users_database(source)
    opened = cache_module.SqliteAnswerStore._open
    commits = []

    def open_with_swap(db, path):
        opened(db, path)
        db.execute("PRAGMA wal_autocheckpoint = 1")

        def on_statement(sql):
            if sql.strip().upper() == "COMMIT":
                commits.append(sql)
                if len(commits) == 2 and source.exists():
                    source.replace(path)

        db.set_trace_callback(on_statement)

    monkeypatch.setattr(cache_module.SqliteAnswerStore, "_open", staticmethod(open_with_swap))
    con = Connection(model="tiny", engine=tiny_engine, cache=path, warn=lambda message: None)
    load_example_tables(con)
    con.add_file_search_path([EXAMPLES])
    with pytest.raises(CacheError, match="was replaced during the run and cannot be opened again"):
        con.run(QUERY, checkpoint_every=8)
    con.close()
    assert not source.exists() and len(commits) >= 2
    assert_untouched(path, expected)


def test_a_cache_replaced_at_its_last_commit_leaves_no_log_beside_the_new_file(tmp_path: Path):
    """No later commit notices the swap: closing the store moves its own log aside all the same."""
    path = tmp_path / "answers.sqlite"
    store = SqliteAnswerStore(path, warn=lambda message: None)
    store.put_many("t", {f"q{i}": Answer(True, 1) for i in range(64)})
    reader = sqlite3.connect(path)
    reader.execute("SELECT count(*) FROM answers").fetchall()
    expected = users_database(tmp_path / "app.db")
    (tmp_path / "app.db").replace(path)
    store.close()
    reader.close()
    assert_untouched(path, expected)
