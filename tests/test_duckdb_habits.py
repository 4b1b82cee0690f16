"""Habits of DuckDB users: SQL on standard input and `-c`, EXPLAIN inside SQL, printable plans.
CLI cases run the real `aisql` command."""

from __future__ import annotations

import subprocess
import sys

import aisql
from conftest import ROOT

AISQL = [sys.executable, "-m", "aisql.cli"]


def aisql_cmd(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*AISQL, *args], input=stdin, capture_output=True, text=True, cwd=ROOT, timeout=300, env=None,
    )


def test_sql_from_standard_input_and_dash_c():
    piped = aisql_cmd("run", "--format", "csv", stdin="SELECT 42 AS answer")
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.splitlines() == ["answer", "42"]
    dash = aisql_cmd("run", "-", "--format", "csv", stdin="SELECT 'x' AS letter;")
    assert dash.stdout.splitlines() == ["letter", "x"]
    dash_c = aisql_cmd("run", "-c", "SELECT 7 AS seven", "--format", "csv", stdin="")
    assert dash_c.stdout.splitlines() == ["seven", "7"]
    empty = aisql_cmd("run", stdin="")
    assert empty.returncode == 1 and "error: no query: standard input is empty" in empty.stderr
    assert "Traceback" not in empty.stderr


def test_explain_inside_sql_gives_aisqls_plan(tiny_engine):
    con = aisql.Connection(engine=tiny_engine, cache=False)
    con.duckdb.execute("CREATE TABLE t AS SELECT * FROM (VALUES ('a tent'), ('a kettle')) v(x)")
    plan = con.run("EXPLAIN SELECT x FROM t WHERE AI.IF(PROMPT('Is {x} for camping?'))").table
    text = "\n".join(plan.column("plan").to_pylist())
    assert "AIFilter ai_1 AI.IF" in text and "prompts total: 2" in text
    plain = con.run("EXPLAIN SELECT x FROM t").table  # no AI call: DuckDB's own EXPLAIN
    assert "explain_key" in plain.column_names
    try:
        con.run("EXPLAIN ANALYZE SELECT x FROM t WHERE AI.IF(x)")
    except aisql.AisqlError as err:
        assert "EXPLAIN ANALYZE" in err.message and "--stats-json" in err.hint
    else:
        raise AssertionError("EXPLAIN ANALYZE of an AI query should be refused")


def test_explanations_print_as_trees(tiny_engine):
    con = aisql.Connection(engine=tiny_engine, cache=False)
    con.duckdb.execute("CREATE TABLE t AS SELECT 'a tent' AS x")
    explanation = con.explain("SELECT x FROM t WHERE AI.IF(x)")
    text = str(explanation)
    assert text.startswith("Plan  model") and "AIFilter ai_1" in text and "<rich" not in text
    html = explanation._repr_html_()
    assert html.lstrip().startswith("<!DOCTYPE html>") and "AIFilter" in html
    assert explanation.__rich__() is not None
