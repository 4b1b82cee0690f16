"""One aisql connection, several threads: every call made while another thread's call is running
gets ConnectionBusyError and nothing else (was: DuckDB's own errors, a clash of a run's
temporary functions, IndexError/ValueError from the run's statistics); the running call ends as
if alone. Connections sharing one model session run side by side."""

from __future__ import annotations

import threading

import pytest

from aisql.errors import ConnectionBusyError

QUERY = "SELECT id FROM reviews WHERE id <= 12 AND AI.IF(PROMPT('{review} is positive'))"


class HeldEngine:
    """The tiny engine, holding its first encoding until `release` is set: a run is then
    certainly in flight while the test calls from another thread (no sleeps)."""

    def __init__(self, engine):
        self._engine = engine
        self.entered = threading.Event()
        self.release = threading.Event()

    def encode_prompts(self, instruction, texts):
        self.entered.set()
        assert self.release.wait(timeout=600)
        return self._engine.encode_prompts(instruction, texts)

    def __getattr__(self, name):
        return getattr(self._engine, name)


def test_a_second_thread_is_refused_with_one_error_and_the_first_run_is_unharmed(make_connection, tiny_engine):
    expected = make_connection().run(QUERY).table.to_pylist()
    held = HeldEngine(tiny_engine)
    con = make_connection(engine=held)
    outcome = {}

    def first():
        outcome["table"] = con.run(QUERY).table.to_pylist()

    runner = threading.Thread(target=first)
    runner.start()
    assert held.entered.wait(timeout=600)
    calls = {
        "run": lambda: con.run(QUERY),
        "sql": lambda: con.sql("SELECT 1"),
        "explain": lambda: con.explain(QUERY),
        "register": lambda: con.register("other", "examples/data/products.csv"),
        "close": con.close,
    }
    refused = {}
    for name, call in calls.items():
        with pytest.raises(ConnectionBusyError) as err:
            call()
        refused[name] = err.value
    held.release.set()
    runner.join()

    assert outcome["table"] == expected
    for name, err in refused.items():
        assert "busy with a call from another thread" in err.message, name
        assert "session=con.session" in err.hint
    assert con.run("SELECT count(*) AS n FROM reviews").table.to_pylist() == [{"n": 120}]  # usable again


def test_connections_sharing_a_session_run_side_by_side(make_connection):
    first = make_connection()
    alone = [make_connection().run(QUERY.replace("12", str(n))).table.to_pylist() for n in (10, 14, 18)]
    connections = [first] + [make_connection(session=first.session) for _ in range(2)]
    results: dict[int, object] = {}

    def go(i):
        try:
            results[i] = connections[i].run(QUERY.replace("12", str((10, 14, 18)[i]))).table.to_pylist()
        except Exception as err:  # noqa: BLE001 - the test reports any failure below
            results[i] = err

    threads = [threading.Thread(target=go, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [results[i] for i in range(3)] == alone
