"""Habits of DuckDB users: SQL on standard input and `-c`, EXPLAIN inside SQL, printable plans.
CLI cases run the real `aisql` command."""

from __future__ import annotations

import subprocess
import sys

import pytest

import aisql
from conftest import ROOT

pytestmark = pytest.mark.slow  # the CLI and the shell in subprocesses

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


def test_every_statement_with_rows_is_printed_in_turn():
    script = "SELECT 1 AS a; CREATE TABLE x AS SELECT 2 AS b; SELECT * FROM x; SELECT 'z' AS c"
    as_json = aisql_cmd("run", "-c", script, "--format", "json", stdin="")
    assert as_json.returncode == 0, as_json.stderr
    import json

    documents = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert documents == [
        {"statement": 1, "rows": [{"a": 1}]},
        {"statement": 3, "rows": [{"b": 2}]},  # CREATE ... AS has no rows to show, as in duckdb
        {"statement": 4, "rows": [{"c": "z"}]},
    ]
    as_csv = aisql_cmd("run", "-c", "SELECT 1 AS a; SELECT 2 AS b", "--format", "csv", stdin="")
    assert as_csv.stdout.split("\n\n") == ["a\n1", "b\n2\n"]
    one = aisql_cmd("run", "-c", "CREATE TABLE y AS SELECT 1 AS v; SELECT v FROM y", "--format", "json", stdin="")
    assert json.loads(one.stdout) == [{"v": 1}]  # one result: the plain JSON array, as before


def test_python_api_keeps_every_result(tiny_engine):
    con = aisql.Connection(engine=tiny_engine, cache=False)
    result = con.run("SELECT 1 AS a; CREATE TABLE t AS SELECT 2 AS b; SELECT b FROM t")
    assert [(n, t.to_pylist()) for n, t in result.results] == [(1, [{"a": 1}]), (3, [{"b": 2}])]
    assert result.table.to_pylist() == [{"b": 2}]


def test_explain_says_why_a_later_statements_input_is_unknown(tiny_engine):
    con = aisql.Connection(engine=tiny_engine, cache=False)
    explanation = con.explain("CREATE TEMP TABLE x AS SELECT 'a tent' AS t; SELECT t FROM x WHERE AI.IF(t)")
    estimate = explanation.estimates[1].node("ai_1")
    assert estimate.quality == "unknown"
    assert "table x, which an earlier statement of the script creates" in estimate.reason


def test_parameters_are_values_never_sql(tiny_engine):
    con = aisql.Connection(engine=tiny_engine, cache=False)
    con.duckdb.execute("CREATE TABLE t AS SELECT * FROM (VALUES (1, 'a tent'), (2, 'a kettle'), (3, 'a lamp')) v(id, x)")
    hostile = "x' OR 1=1 --"
    assert con.sql("SELECT id FROM t WHERE x = $x", params={"x": hostile}).fetchall() == []
    assert con.sql("SELECT id FROM t WHERE id > ? AND id < ?", params=[1, 3]).fetchall() == [(2,)]
    assert con.sql("SELECT $2 AS a, $1 AS b", params=["first", 2.5]).fetchall() == [(2.5, "first")]
    # In a prompt: the value is the text the model sees, and planned == naive.
    sql = "SELECT id, AI.IF(PROMPT('Is {x} useful for {0}?', $what)) AS ok FROM t WHERE id <> $skip ORDER BY id"
    params = {"what": "camping", "skip": 3}
    planned, naive = con.run(sql, params=params), con.run(sql, params=params, naive=True)
    assert planned.table.to_pylist() == naive.table.to_pylist() and planned.table.num_rows == 2
    with pytest.raises(aisql.AisqlError, match=r"no value for parameter \$skip"):
        con.run(sql, params={"what": "camping"})
    with pytest.raises(aisql.AisqlError, match="'extra' was given but the query does not use it"):
        con.run("SELECT $a", params={"a": 1, "extra": 2})
    with pytest.raises(aisql.AisqlError, match="has parameters"):
        con.run("SELECT ?")


def test_cli_parameters():
    done = aisql_cmd("run", "-c", "SELECT $city AS c, $n + 1 AS m", "--param", "city=Berlin", "--param", "n=41", "--format", "csv", stdin="")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["c,m", "Berlin,42"]
    positional = aisql_cmd("run", "-c", "SELECT ? AS a", "--param", "1=x", "--format", "csv", stdin="")
    assert positional.stdout.splitlines() == ["a", "x"]
    mixed = aisql_cmd("run", "-c", "SELECT ?", "--param", "1=x", "--param", "b=y", stdin="")
    assert mixed.returncode == 1 and "either by number" in mixed.stderr


def test_shell_runs_statements_as_they_complete():
    from aisql.shell import complete_statements

    assert complete_statements("SELECT 1; SELECT ';' AS s;\nSELECT 2") == (["SELECT 1;", " SELECT ';' AS s;"], "\nSELECT 2")
    assert complete_statements("SELECT 'open;") == ([], "SELECT 'open;")  # inside a string: wait
    script = "SELECT 1 AS a;\nCREATE TABLE t AS SELECT 'x'\n  AS b; SELECT nope;\nSELECT b FROM t"
    done = aisql_cmd("shell", "--format", "csv", stdin=script)
    assert done.stdout.splitlines() == ["a", "1", "b", "x"]  # one session: t persists; the last `;` optional
    assert done.returncode == 1 and done.stderr.count("error:") == 1 and 'column "nope"' in done.stderr


def test_shell_is_one_session(tmp_path):
    script = "CREATE TABLE t AS SELECT * FROM (VALUES ('a tent'), ('a kettle')) v(x);\n" + "SELECT x, AI.IF(x) AS ok FROM t;\n" * 2
    done = aisql_cmd("shell", "--model", "tiny", "--format", "csv", "--no-cache", stdin=script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("x,ok") == 2
    first, second = [line for line in done.stderr.splitlines() if "evaluated" in line]
    assert "2 evaluated" in first and "0 evaluated" in second  # the same session: its model and answers


def test_progress_bar_in_a_notebook(monkeypatch, tiny_engine):
    import types

    from aisql import api
    from aisql.progress_bar import RichProgress

    assert not api.in_notebook()  # plain Python: no bar unless asked
    kernel_shell = types.SimpleNamespace(kernel=object())
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: kernel_shell))
    assert api.in_notebook()
    chosen = []
    real = api.notebook_progress

    def spy():
        bar = real()
        chosen.append(bar)
        return bar

    monkeypatch.setattr(api, "notebook_progress", spy)
    con = aisql.Connection(engine=tiny_engine, cache=False)
    con.run("SELECT 1")
    assert len(chosen) == 1 and isinstance(chosen[0], RichProgress)
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: types.SimpleNamespace()))
    assert not api.in_notebook()  # a terminal IPython shell has no kernel


def test_sampling_in_sql_is_seeded_and_reproducible(tiny_engine):
    con = aisql.Connection(engine=tiny_engine, cache=False)
    con.duckdb.execute("CREATE TABLE t AS SELECT * FROM (VALUES ('a tent'), ('a kettle'), ('a tent')) v(x)")
    sql = "SELECT x, AI.GENERATE(PROMPT('Describe {x}'), max_tokens => 8, temperature => 0.9, seed => SEED) AS g FROM t"
    planned = con.run(sql.replace("SEED", "7"))
    naive = con.run(sql.replace("SEED", "7"), naive=True)
    rows = planned.table.to_pylist()
    assert rows == naive.table.to_pylist()  # planned == naive: each prompt drawn alone, seeded by its text
    assert rows[0]["g"] == rows[2]["g"]  # the same prompt, the same draw
    assert planned.stats.totals()["draft_tokens"] == 0  # no speculation when sampling
    other = con.run(sql.replace("SEED", "8")).table.to_pylist()
    greedy = con.run("SELECT x, AI.GENERATE(PROMPT('Describe {x}'), max_tokens => 8) AS g FROM t").table.to_pylist()
    assert other != rows or greedy != rows  # a seed or the temperature changes the text
    with pytest.raises(aisql.AisqlError, match="temperature must be between 0 and 2"):
        con.run("SELECT AI.GENERATE(x, temperature => 7) FROM t")
    bq = aisql.Connection(engine=tiny_engine, cache=False, dialect="bigquery")
    bq.duckdb.execute("CREATE TABLE t AS SELECT * FROM (VALUES ('a tent'), ('a kettle'), ('a tent')) v(x)")
    from_params = bq.run(
        """SELECT x, AI.GENERATE(PROMPT('Describe {x}'), model_params => JSON '{"generation_config": {"temperature": 0.9, "seed": 7, "max_output_tokens": 8}}').result AS g FROM t"""
    )
    assert from_params.table.to_pylist() == rows and not from_params.stats.notes  # BigQuery's spelling of the same call


def test_output_all_writes_every_result(tmp_path):
    import pyarrow.parquet as pq

    target = tmp_path / "results"
    done = aisql_cmd("run", "-c", "SELECT 1 AS a; CREATE TABLE x AS SELECT 2 AS b; SELECT * FROM x", "--output-all", str(target), "-q", stdin="")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in target.iterdir()) == ["statement_1.parquet", "statement_3.parquet"]
    assert pq.read_table(target / "statement_3.parquet").to_pylist() == [{"b": 2}]


def test_prepared_statements_run_and_never_hide_an_ai_call(tiny_engine):
    """Issue 58, cause 14: PREPARE / EXECUTE without AI calls is DuckDB's as ever; an AI call in a
    prepared body (which sqlglot reads as an opaque command) is refused at its position, before
    anything runs — and the connection stays usable."""
    con = aisql.Connection(engine=tiny_engine, cache=False)
    con.duckdb.execute("CREATE TABLE t AS SELECT * FROM (VALUES (1, 'a tent'), (2, 'a kettle')) v(id, x)")
    assert con.run("PREPARE q AS SELECT x FROM t WHERE id = $1;\nEXECUTE q(2);").table.to_pylist() == [{"x": "a kettle"}]
    for body, spelling, line, col in [
        ("PREPARE p AS SELECT AI.IF(PROMPT('Is {0} useful?', x)) FROM t", "AI.IF", 1, 21),
        ("/* c */ PREPARE p(INT) AS\nSELECT x FROM t WHERE AI.SCORE(PROMPT('{0}', x)) > $1", "AI.SCORE", 2, 23),
        ("prepare p as select AI_CLASSIFY(x, ['a', 'b']) from t", "AI_CLASSIFY", 1, 21),
    ]:
        with pytest.raises(aisql.AisqlError, match=f"{spelling.replace('.', '[.]')} cannot be in a prepared statement") as err:
            con.run(body)
        assert (err.value.line, err.value.col) == (line, col), body
    assert con.run("SELECT count(*) AS n FROM t").table.to_pylist() == [{"n": 2}]
