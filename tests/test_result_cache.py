"""The durable result cache, budgets, context overflow and progress, through the Python API.

Process-level behaviour (kill -9, two processes) is in test_crash_safety.py.
"""

from __future__ import annotations

import io
import multiprocessing
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import EXAMPLES, load_example_tables

from aisql.api import Connection
from aisql.cli import main
from aisql.engine.model.resolving import resolve_model
from aisql.engine.options import EngineOptions
from aisql.executor.store.answer_store import Answer
from aisql.executor.options.budget import Budget, BudgetExceeded
from aisql.executor.store.cache import CacheError, SqliteAnswerStore
from aisql.executor.answers.evaluate import ContextOverflow

HOT_LEADS = (EXAMPLES / "hot_leads.sql").read_text()
TWO_NODES = (
    "SELECT id, AI.CLASSIFY(PROMPT('{review}'), ['praise', 'complaint']) AS kind FROM reviews "
    "WHERE AI.IF(PROMPT('{review} is positive'), {'selectivity': 0.01}) ORDER BY id"
)


def connection(cache, **kwargs) -> Connection:
    con = Connection(model="tiny", cache=cache, **kwargs)
    load_example_tables(con)
    con.add_file_search_path([EXAMPLES])
    return con


# ---- the store ----------------------------------------------------------------------------------


def test_store_keeps_answers_per_task(tmp_path: Path):
    store = SqliteAnswerStore(tmp_path / "answers.sqlite")
    store.put_many("model-a/if", {"x": Answer(True, 5, 0.9), "y": Answer(False, 6, 0.7)})
    store.put_many("model-a/if", {"x": Answer(False, 5, 0.1)})  # deterministic answers: first one wins
    assert store.get_many("model-a/if", ["x", "y", "z"]) == {"x": Answer(True, 5, 0.9), "y": Answer(False, 6, 0.7)}
    assert store.get_many("model-b/if", ["x"]) == {}  # another model's answers are not this one's
    assert store.stats()["entries"] == 2 and store.integrity() == "ok"
    store.close()
    reopened = SqliteAnswerStore(tmp_path / "answers.sqlite")
    assert reopened.get_many("model-a/if", ["y"]) == {"y": Answer(False, 6, 0.7)}
    assert reopened.clear() == 2 and reopened.stats()["entries"] == 0


def _write_answers(path: str, worker: int) -> None:
    store = SqliteAnswerStore(path)  # every worker opens the new file at once
    for batch in range(10):
        store.put_many("m/t", {f"shared {batch} {i}": Answer(i, 1, None) for i in range(20)})
        store.put_many("m/t", {f"own {worker} {batch} {i}": Answer(worker, 1, None) for i in range(20)})
    store.close()


def test_concurrent_writers_keep_one_consistent_cache(tmp_path: Path):
    path = str(tmp_path / "answers.sqlite")
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_write_answers, args=(path, w)) for w in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert [w.exitcode for w in workers] == [0] * 6
    store = SqliteAnswerStore(path)
    assert store.integrity() == "ok"
    assert store.stats()["entries"] == 10 * 20 + 6 * 10 * 20


def test_a_file_that_is_not_a_cache_is_refused_untouched(tmp_path: Path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n" * 100)
    with pytest.raises(CacheError, match="is not an aisql result cache"):
        SqliteAnswerStore(notes)
    assert notes.read_text() == "my notes\n" * 100


def _sqlite_files(path: Path) -> list[Path]:
    return [p for p in path.parent.glob(path.name + "*")]


def test_a_foreign_sqlite_database_is_refused_untouched(tmp_path: Path):
    """Was: --cache app.sqlite added `answers` and `meta` to the user's own database."""
    app = tmp_path / "app.sqlite"
    with sqlite3.connect(app) as db:
        db.execute("CREATE TABLE users (id INTEGER, name TEXT)")
        db.execute("INSERT INTO users VALUES (1, 'Ann')")
    before = app.read_bytes()
    with pytest.raises(CacheError, match=r"is a SQLite database of another application \(tables: users\)"):
        SqliteAnswerStore(app)
    assert app.read_bytes() == before and _sqlite_files(app) == [app]
    result = CliRunner().invoke(main, ["cache", "clear", "--cache", str(app), "--yes"])
    assert result.exit_code == 1 and "another application" in result.stderr
    marked = tmp_path / "marked.sqlite"
    with sqlite3.connect(marked) as db:  # sibling: another application's mark, no tables yet
        db.execute("PRAGMA application_id = 42")
    with pytest.raises(CacheError, match="application id 0x2a"):
        SqliteAnswerStore(marked)


def test_a_cache_written_before_the_mark_is_still_read(tmp_path: Path):
    path = tmp_path / "answers.sqlite"
    store = SqliteAnswerStore(path)
    store.put_many("t", {"x": Answer(True, 1, 0.9)})
    store.close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA application_id = 0")  # as every cache before this version
    reopened = SqliteAnswerStore(path)
    assert reopened.get_many("t", ["x"]) == {"x": Answer(True, 1, 0.9)}
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA application_id").fetchall()[0][0] != 0  # marked now


def test_a_cache_deleted_mid_run_is_created_again_and_said(tmp_path: Path):
    """Was: every later answer went to the unlinked file, the run said nothing, a rerun paid again."""
    path = tmp_path / "answers.sqlite"
    said: list[str] = []
    store = SqliteAnswerStore(path, warn=said.append)
    store.put_many("t", {"a": Answer(True, 1, 0.9), "b": Answer(False, 1, 0.1)})
    for file in _sqlite_files(path):
        file.unlink()
    store.put_many("t", {"c": Answer(True, 1, 0.8)})
    assert said and "was deleted during the run; 2 answers this run had committed went with the old file" in said[0]
    assert store.committed == 1
    store.close()
    assert SqliteAnswerStore(path).get_many("t", ["a", "b", "c"]) == {"c": Answer(True, 1, 0.8)}


def test_a_cache_replaced_mid_run_by_a_foreign_database_stops_the_commit(tmp_path: Path):
    path = tmp_path / "answers.sqlite"
    store = SqliteAnswerStore(path, warn=lambda message: None)
    store.put_many("t", {"a": Answer(True, 1, 0.9)})
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE users (id INTEGER)")
    for file in _sqlite_files(path):
        file.unlink()
    other.rename(path)
    with pytest.raises(CacheError, match="was replaced during the run and cannot be opened again") as err:
        store.put_many("t", {"b": Answer(True, 1, 0.9)})
    assert "1 answers this run committed went with the old file" in err.value.hint
    with sqlite3.connect(path) as db:
        assert [r[0] for r in db.execute("SELECT name FROM sqlite_master")] == ["users"]
    store.close()


def _entries(path: Path) -> int:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return db.execute("SELECT count(*) FROM answers").fetchall()[0][0]


class DeletingEngine:
    """The tiny engine; deletes the result cache once, after the run's first commit."""

    def __init__(self, engine, path: Path):
        self._engine, self._path, self.deleted = engine, path, False

    def score(self, requests, **kwargs):
        if not self.deleted and self._path.exists() and _entries(self._path) > 0:
            for file in _sqlite_files(self._path):
                file.unlink()
            self.deleted = True
        return self._engine.score(requests, **kwargs)

    def __getattr__(self, name):
        return getattr(self._engine, name)


def test_a_run_whose_cache_is_deleted_keeps_what_follows(tmp_path: Path, tiny_engine):
    path = tmp_path / "answers.sqlite"
    said: list[str] = []
    engine = DeletingEngine(tiny_engine, path)
    con = connection(path, engine=engine, warn=said.append)
    query = "SELECT id FROM reviews WHERE AI.IF(PROMPT('{review} is positive'))"
    first = con.run(query, checkpoint_every=16)
    assert engine.deleted and any("was deleted during the run" in line for line in said)
    kept = con.store.committed
    assert 0 < kept < first.stats.totals()["prompts_evaluated"]
    rerun = connection(path, engine=tiny_engine).run(query)
    assert rerun.stats.totals()["prompts_cached"] == kept
    assert rerun.table.equals(first.table)


# ---- runs ---------------------------------------------------------------------------------------


def test_rerun_is_answered_from_the_cache_without_loading_the_model(tmp_path: Path):
    cache = tmp_path / "answers.sqlite"
    first = connection(cache).run(HOT_LEADS)
    again = connection(cache)
    second = again.run(HOT_LEADS)
    assert second.table.equals(first.table)
    totals = second.stats.totals()
    assert totals["prompts_evaluated"] == 0 and totals["computed_tokens"] == 0
    assert totals["prompts_cached"] == first.stats.totals()["prompts_unique"] > 0
    assert not again.session.loaded and second.model.device is None
    assert "meaningless" in second.model.note  # the test model's answers say so, cached or not


def test_cached_answers_are_planned_answers(tmp_path: Path, make_connection):
    """Answers from the cache equal what naive row-by-row execution computes."""
    cache = tmp_path / "answers.sqlite"
    query = TWO_NODES.replace("FROM reviews WHERE", "FROM reviews WHERE id <= 30 AND")  # naive runs row by row: keep it small
    connection(cache).run(query)
    cached = connection(cache).run(query)
    naive = make_connection().run(query, naive=True)
    assert cached.stats.totals()["prompts_evaluated"] == 0
    assert cached.table.equals(naive.table)


def test_cache_key_covers_model_numerics_and_task(tmp_path: Path, tiny_engine):
    tiny = resolve_model("tiny")
    plain = tiny.fingerprint(EngineOptions())
    assert plain == tiny_engine.info.fingerprint  # known before loading = what the engine says
    assert tiny.fingerprint(EngineOptions(quantize="int8")) != plain
    assert tiny.fingerprint(EngineOptions(dtype="bfloat16")) != plain
    cache = tmp_path / "answers.sqlite"
    connection(cache).run("SELECT AI.CLASSIFY(PROMPT('{review}'), ['a', 'b']) FROM reviews LIMIT 5")
    other_labels = connection(cache).run("SELECT AI.CLASSIFY(PROMPT('{review}'), ['a', 'c']) FROM reviews LIMIT 5")
    assert other_labels.stats.totals()["prompts_cached"] == 0


def test_fingerprint_follows_weight_bytes_not_names(tmp_path: Path):
    copy = tmp_path / "model"
    shutil.copytree(resolve_model("tiny").location, copy)
    before = resolve_model(str(copy)).fingerprint(EngineOptions())
    weights = next(copy.glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # same name, same size, other weights
    weights.write_bytes(bytes(data))
    assert resolve_model(str(copy)).fingerprint(EngineOptions()) != before


# ---- budget -------------------------------------------------------------------------------------


def test_budget_refuses_a_query_the_planner_expects_over_the_limit(tmp_path: Path):
    cache = tmp_path / "answers.sqlite"
    con = connection(cache)
    with pytest.raises(BudgetExceeded, match="over --max-prompts 50: not started"):
        con.run(HOT_LEADS, max_prompts=50)
    assert SqliteAnswerStore(cache).stats()["entries"] == 0


# The hint makes the planner expect ~2 CLASSIFY prompts after the 190-pair join; ~120 pairs pass.
UNDERESTIMATED = (
    "SELECT c.name, p.name, AI.CLASSIFY(PROMPT('{c.profile} / {p.name}'), ['gift', 'own use']) AS why "
    "FROM customers c JOIN products p "
    "ON AI.IF(PROMPT('{c.profile} might buy this: {p.description}'), {'selectivity': 0.01}) "
    "WHERE c.country = 'Germany' AND p.price < 100 ORDER BY 1, 2"
)


@pytest.mark.slow  # over ~2 s: the fast tier stays under 3 min
def test_budget_stops_midway_keeps_answers_and_a_rerun_continues(tmp_path: Path, make_connection):
    """The estimate (~192 prompts) fits the limit, the real work does not: the run stops exactly
    at the limit while running, with every answer kept, and a rerun only adds the rest."""
    cache = tmp_path / "answers.sqlite"
    with pytest.raises(BudgetExceeded, match="stopped after 250 new prompts"):
        connection(cache).run(UNDERESTIMATED, max_prompts=250, checkpoint_every=16)
    assert SqliteAnswerStore(cache).stats()["entries"] == 250
    resumed = connection(cache).run(UNDERESTIMATED)
    totals = resumed.stats.totals()
    assert totals["prompts_cached"] == 250 and totals["prompts_evaluated"] > 0
    assert resumed.table.equals(make_connection().run(UNDERESTIMATED).table)


def test_budget_arithmetic():
    budget = Budget(max_prompts=10, max_usd=1.0, price_per_hour=3600.0)  # $1 per second of model time
    assert budget.allowed(4) == 4
    budget.spend(4, 0.2)
    assert budget.allowed(100) == 6  # prompts left
    budget.spend(2, 0.6)  # $0.8 spent on 6 prompts
    assert budget.allowed(100) == 1  # $0.2 left at ~$0.133 a prompt
    with pytest.raises(BudgetExceeded, match="--max-cost 1"):
        budget.check_estimate(prompts=3, usd=0.5, where="the query")


# ---- context overflow ---------------------------------------------------------------------------


LONG = "SELECT id, AI.IF(PROMPT('{text} is positive')) AS positive FROM notes ORDER BY id"


def _notes(con) -> None:
    long_text = "lorem ipsum dolor sit amet " * 2000  # far over the tiny model's 8192 tokens
    con.duckdb.execute("CREATE TABLE notes AS SELECT * FROM (VALUES (1, 'short and sweet'), (2, ?)) t(id, text)", [long_text])


@pytest.mark.slow
def test_overflow_is_an_error_by_default_and_truncated_on_request(make_connection):
    con = make_connection()
    _notes(con)
    with pytest.raises(ContextOverflow, match="does not fit the model's context"):
        con.run(LONG)
    planned = con.run(LONG, on_overflow="truncate")
    naive = con.run(LONG, on_overflow="truncate", naive=True)
    assert planned.table.num_rows == 2 and planned.table.equals(naive.table)
    assert planned.stats.totals()["prompts_truncated"] == 1


# ---- progress -----------------------------------------------------------------------------------


class Recorder:
    def __init__(self):
        self.events = []

    def start(self, node, description, total, cached):
        self.events.append(("start", node, total, cached))

    def advance(self, node, prompts, tokens):
        self.events.append(("advance", node, prompts, tokens))

    def finish(self, node):
        self.events.append(("finish", node))


def test_progress_reports_every_prompt_evaluated(make_connection):
    recorder = Recorder()
    con = make_connection()
    con.add_file_search_path([EXAMPLES])
    result = con.run(HOT_LEADS, progress=recorder, checkpoint_every=32)
    starts = [e for e in recorder.events if e[0] == "start"]
    advances = [e for e in recorder.events if e[0] == "advance"]
    assert sum(e[2] for e in starts) == sum(e[2] for e in advances) == result.stats.totals()["prompts_evaluated"]
    assert len(advances) >= 190 // 32  # one report per checkpoint
    assert sum(e[3] for e in advances) > 0 and recorder.events[-1][0] == "finish"


def test_progress_bar_draws_on_its_own_console():
    from rich.console import Console

    from aisql.progress_bar import RichProgress

    screen = io.StringIO()
    bar = RichProgress(Console(file=screen, force_terminal=True, width=120))
    bar.start("n1", "AI.IF(...)", total=10, cached=3)
    bar.advance("n1", 4, 400)
    bar.finish("n1")
    bar.close()
    assert "prompts" in screen.getvalue()


def test_progress_shows_time_waited_while_nothing_is_answered():
    """Issue 58 (remote servers: progress while waiting): a request that takes a while answers
    no prompt, so the bar alone would stand still; the time spent ticks on its own. Drawn with
    the test's clock: 75 s with no answer shows 0:01:15."""
    from rich.console import Console

    from aisql.progress_bar import RichProgress

    clock = [1000.0]
    screen = io.StringIO()
    bar = RichProgress(Console(file=screen, force_terminal=True, width=160), get_time=lambda: clock[0])
    bar.start("n1", "AI.IF(...)", total=10, cached=0)
    clock[0] += 75.0
    bar._bars.refresh()
    assert "0:01:15" in screen.getvalue()
    bar.close()


# ---- CLI ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_cache_commands(tmp_path: Path, monkeypatch):
    cache = tmp_path / "answers.sqlite"
    monkeypatch.chdir(EXAMPLES)
    run = CliRunner().invoke(main, ["run", "hot_leads.sql", "--model", "tiny", "--cache", str(cache), "-q", "--format", "csv"])
    assert run.exit_code == 0, run.output
    stats = CliRunner().invoke(main, ["cache", "stats", "--cache", str(cache)])
    assert stats.exit_code == 0 and "190 answers" in stats.stdout
    again = CliRunner().invoke(main, ["run", "hot_leads.sql", "--model", "tiny", "--cache", str(cache), "--format", "csv"])
    assert again.stdout == run.stdout and "190 from the result cache" in again.stderr
    refused = CliRunner().invoke(main, ["cache", "clear", "--cache", str(cache)])  # no terminal, no --yes
    assert refused.exit_code == 1 and "confirm with --yes" in refused.stderr
    cleared = CliRunner().invoke(main, ["cache", "clear", "--cache", str(cache), "--yes"])
    assert cleared.exit_code == 0 and "removed 190" in cleared.stderr
    with sqlite3.connect(cache) as db:
        assert db.execute("SELECT count(*) FROM answers").fetchall() == [(0,)]


# ---- damaged caches -----------------------------------------------------------------------------

SCRIBBLES = (
    "not json",
    '"maybe"',
    "12345",
    '{"v": true, "c": 5}',  # a missing key
    '{"v": "maybe", "c": 5, "s": 0.5}',  # no IF, CLASSIFY or SCORE answers "maybe"
    '{"v": 7, "c": 5, "s": 2.5}',  # a score that is no probability
)


def test_edited_or_corrupt_entries_are_asked_again_and_replaced(tmp_path: Path):
    """Entries edited by hand used to fail the query with an internal JSONDecodeError,
    ArrowInvalid or KeyError: each is a miss now — recomputed, replaced, and the run says so."""
    cache = tmp_path / "answers.sqlite"
    query = (
        "SELECT id, AI.CLASSIFY(PROMPT('{review}'), ['praise', 'complaint']) AS kind, "
        "AI.SCORE(PROMPT('Rate {review} from 1 to 5')) AS stars FROM reviews "
        "WHERE id <= 20 AND AI.IF(PROMPT('{review} is positive')) ORDER BY id"
    )
    first = connection(cache).run(query)
    with sqlite3.connect(cache) as db:
        keys = [key for (key,) in db.execute("SELECT key FROM answers ORDER BY key")]
        for i, key in enumerate(keys):
            db.execute("UPDATE answers SET value = ? WHERE key = ?", (SCRIBBLES[i % len(SCRIBBLES)], key))
    heard: list[str] = []
    again = connection(cache, warn=heard.append).run(query)
    assert again.table.equals(first.table)
    assert again.stats.totals()["prompts_evaluated"] == len(keys)
    assert sum(int(line.split()[1].replace(",", "")) for line in heard) == len(keys), heard
    assert all("could not be read (edited or corrupt)" in line for line in heard)
    heard.clear()
    third = connection(cache, warn=heard.append).run(query)  # the entries were replaced
    assert third.table.equals(first.table) and third.stats.totals()["prompts_evaluated"] == 0 and not heard


def test_a_damaged_cache_file_is_one_clear_error(tmp_path: Path):
    cache = tmp_path / "answers.sqlite"
    connection(cache).run(HOT_LEADS)
    with sqlite3.connect(cache) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every answer in the main file
    data = bytearray(cache.read_bytes())
    data[4096:] = b"\xa5" * (len(data) - 4096)  # every page after the first scribbled over
    cache.write_bytes(bytes(data))
    for command in (["cache", "stats"], ["cache", "clear", "--yes"]):
        result = CliRunner().invoke(main, [*command, "--cache", str(cache)])
        assert result.exit_code == 1, result.output
        assert "is damaged" in result.stderr and "hint: move it aside or delete it" in result.stderr
        assert "Traceback" not in result.output and "DatabaseError" not in result.stderr


@pytest.mark.parametrize("read_only", ["directory", "file"])
def test_a_read_only_cache_is_said_as_such(tmp_path: Path, monkeypatch, read_only):
    """Issue 58, cause 18: a read-only cache directory (or file) said SQLite's "unable to open
    database file". It is one line naming the place and what to do, before anything runs. (Tests
    run as root, for whom every file is writable: the permission is denied through os.access,
    which is what the store asks.)"""
    import os

    from aisql.cli import main
    from click.testing import CliRunner

    import aisql.executor.store.cache as cache_module

    cache = tmp_path / "ro" / "answers.sqlite"
    cache.parent.mkdir()
    if read_only == "file":
        SqliteAnswerStore(cache).close()
    denied = cache.parent if read_only == "directory" else cache
    real_access = os.access
    monkeypatch.setattr(cache_module.os, "access", lambda p, mode: False if Path(p) == denied and mode & os.W_OK else real_access(p, mode))
    with pytest.raises(CacheError, match="cannot write the result cache .* is read-only"):
        SqliteAnswerStore(cache)
    done = CliRunner().invoke(main, ["run", "--model", "tiny", "--cache", str(cache), "-e", "SELECT AI.IF(PROMPT('Is {0} red?', 'a rose'))"])
    assert done.exit_code == 1 and "Traceback" not in done.output and "unable to open" not in done.output
    assert done.stderr.startswith("error: cannot write the result cache") and "--no-cache" in done.stderr
