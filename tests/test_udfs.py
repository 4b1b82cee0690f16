"""AI functions on a plain DuckDB connection (`aisql.register`) against the planned API
(`aisql.connect().sql`) on the same query text and data: the same rows, NULL in -> NULL out,
DuckDB-style errors, harmless re-registration, per-vector dedup and shared caches."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

import aisql
from aisql.api import Connection
from tests.conftest import EXAMPLES

QUERIES = {
    "filter": """
        SELECT id, name FROM customers
        WHERE country = 'Germany' AND ai_if(prompt('{0} Question: does this person love the outdoors?', profile))
        ORDER BY id""",
    "classify": """
        SELECT id, ai_classify(prompt('Review: {0} ({1} stars)', review, rating), ['positive', 'negative', 'neutral']) AS label
        FROM reviews WHERE id <= 30 ORDER BY id""",
    "generate": """
        SELECT id, ai_generate(prompt('A slogan for {0}:', name), 6) AS slogan, ai_generate('Say hi to ' || name) IS NULL AS none
        FROM products WHERE id <= 4 ORDER BY id""",
    "join": """
        SELECT c.id AS customer, p.id AS product
        FROM customers c JOIN products p
          ON ai_if(prompt('{0} might buy this: {1}', c.profile, p.description))
        WHERE c.id <= 6 AND p.price < 60
        ORDER BY customer, product""",
    "nulls_in_select": """
        SELECT id, ai_if(prompt('{0} likes {1}', profile, hobby)) AS likes,
               ai_classify(hobby, ['outdoor', 'indoor']) AS kind
        FROM people WHERE id <= 15 ORDER BY id""",
}


def load_tables(con: duckdb.DuckDBPyConnection) -> None:
    data = EXAMPLES / "data"
    for name in ("customers", "products", "reviews"):
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM read_csv_auto('{data / (name + '.csv')}')")
    con.execute(
        """CREATE TABLE people AS
           SELECT id, CASE WHEN id % 7 = 0 THEN NULL ELSE profile END AS profile,
                  CASE WHEN id % 3 = 0 THEN 'hiking' WHEN id % 3 = 1 THEN 'cooking' ELSE NULL END AS hobby
           FROM customers"""
    )


@pytest.fixture
def plain(tiny_engine):
    con = duckdb.connect()
    load_tables(con)
    functions = aisql.register(con, engine=tiny_engine, cache=False)
    yield con, functions
    con.close()


@pytest.fixture
def planned(tiny_engine):
    con = aisql.connect(engine=tiny_engine, cache=False)
    load_tables(con.duckdb)
    yield con
    con.close()


@pytest.mark.parametrize("name", list(QUERIES))
def test_udfs_equal_planned_sql(plain, planned, name):
    con, functions = plain
    query = QUERIES[name]
    expected = planned.sql(query).fetchall()
    got = con.execute(query).fetchall()
    assert got == expected
    assert expected, "the query returns rows"
    evaluated = sum(s.prompts_evaluated for s in functions.stats.values())
    assert evaluated > 0


def test_nulls_give_null_without_the_model(plain):
    con, functions = plain
    rows = con.execute("SELECT ai_if(NULL), ai_classify(NULL, ['a', 'b']), ai_generate(NULL), prompt('x {0}', NULL)").fetchall()
    assert rows == [(None, None, None, None)]
    assert all(s.prompts_total == 0 for s in functions.stats.values())


def test_each_vector_asks_each_prompt_once_and_caches_are_shared(plain):
    con, functions = plain
    query = "SELECT ai_if(prompt('Is {0} in Europe?', country)) FROM customers"
    first = con.execute(query).fetchall()
    stats = functions.stats["ai_if"]
    distinct = con.execute("SELECT count(DISTINCT country) FROM customers").fetchall()[0][0]
    assert stats.prompts_total == 40
    assert stats.prompts_evaluated == distinct
    assert stats.computed_tokens < stats.logical_tokens
    assert con.execute(query).fetchall() == first
    assert stats.prompts_evaluated == distinct, "the second query is answered from the result cache"
    assert stats.prompts_cached == 0 and stats.prompts_unique == distinct  # seen before: not new


def test_result_cache_on_disk_is_shared_with_planned_runs(tmp_path, tiny_engine):
    cache = tmp_path / "answers.sqlite"
    query = "SELECT id FROM customers WHERE id <= 10 AND ai_if(prompt('{0} Question: a cat owner?', profile)) ORDER BY id"
    planned = Connection(engine=tiny_engine, cache=cache)
    load_tables(planned.duckdb)
    expected = planned.sql(query).fetchall()
    assert planned.last_result.stats.totals()["prompts_evaluated"] == 10
    con = duckdb.connect()
    load_tables(con)
    functions = aisql.register(con, engine=tiny_engine, cache=cache)
    assert con.execute(query).fetchall() == expected
    assert functions.stats["ai_if"].prompts_evaluated == 0
    assert functions.stats["ai_if"].prompts_cached == 10


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("SELECT ai_if(42)", "ai_if(VARCHAR) -> BOOLEAN"),
        ("SELECT ai_classify('x', 'a')", "can't be cast to the destination type VARCHAR[]"),
        ("SELECT ai_generate('x', 'many')", "ai_generate: max_tokens must be an integer between 1 and 8192, got 'many'"),
        ("SELECT ai_generate('x', 3, 4)", "ai_generate takes at most 2 arguments (prompt, max_tokens), got 3"),
        ("SELECT ai_if('x', 'y')", "No function matches the given name and argument types 'ai_if(STRING_LITERAL, STRING_LITERAL)'"),
        ("SELECT ai_classify('x', ['a', 'a'])", "ai_classify: label 'a' appears twice"),
        ("SELECT ai_classify('x', ['a'])", "ai_classify: needs at least two labels"),
        ("SELECT ai_classify('x', ['a', ''])", "ai_classify: a label is empty"),
        ("SELECT ai_generate('x', 0)", "ai_generate: max_tokens must be an integer between 1 and 8192, got 0"),
        ("SELECT prompt('{name}', 1)", "placeholder {name} in template '{name}' is not positional"),
        ("SELECT prompt('{1}', 1)", "placeholder {1} in template '{1}' has no argument (1 given"),
        ("SELECT prompt('{0', 1)", "prompt: "),
        ("SELECT prompt(1, 2)", "No function matches the given name and argument types 'prompt(INTEGER_LITERAL"),
    ],
)
def test_wrong_arguments_give_duckdb_errors(plain, query, message):
    con, _ = plain
    with pytest.raises(duckdb.Error) as raised:
        con.execute(query).fetchall()
    assert message in str(raised.value)
    assert "Traceback" not in str(raised.value)


@pytest.mark.slow
def test_too_long_prompt_is_a_clear_error_or_truncated(tiny_engine):
    con = duckdb.connect()
    aisql.register(con, engine=tiny_engine, cache=False)
    long_text = "word " * (tiny_engine.info.max_context + 10)
    with pytest.raises(duckdb.Error, match="ai_if: .*context"):
        con.execute("SELECT ai_if(?)", [long_text]).fetchall()
    functions = aisql.register(con, engine=tiny_engine, cache=False, on_overflow="truncate")
    assert con.execute("SELECT ai_if(?) IS NOT NULL", [long_text]).fetchall() == [(True,)]
    assert functions.stats["ai_if"].prompts_truncated == 1


def test_registering_twice_is_harmless(plain, tiny_engine):
    con, _ = plain
    query = QUERIES["join"]
    before = con.execute(query).fetchall()
    again = aisql.register(con, engine=tiny_engine, cache=False)
    aisql.register(con, engine=tiny_engine, cache=False)
    assert con.execute(query).fetchall() == before
    assert again.stats["ai_if"].prompts_total == 0, "the last registration's functions answer"


def test_prompt_renders_values_as_duckdb_casts_them(plain):
    con, _ = plain
    row = con.execute(
        "SELECT prompt('{0}|{1}|{2}|{3}|{1}', 100.0::DOUBLE, DATE '2026-01-02', 2.50::DECIMAL(5, 2), [1, 2]),"
        " concat(CAST(100.0::DOUBLE AS VARCHAR), '|', CAST(DATE '2026-01-02' AS VARCHAR), '|',"
        "        CAST(2.50::DECIMAL(5, 2) AS VARCHAR), '|', CAST([1, 2] AS VARCHAR), '|', CAST(DATE '2026-01-02' AS VARCHAR)),"
        " prompt('{{literal}} {0}', 'x')"
    ).fetchall()[0]
    assert row[0] == row[1]
    assert row[2] == "{literal} x"


def test_connect_sql_explain_and_register(tiny_engine, tmp_path):
    con = aisql.connect(engine=tiny_engine, cache=False)
    con.register("films", pa.table({"title": ["Airplane!", "Alien", "Airplane!"]}))
    con.register("customers", EXAMPLES / "data" / "customers.csv")
    relation = con.sql("SELECT title, AI.IF(PROMPT('Is {title} a comedy?')) AS comedy FROM films")
    assert isinstance(relation, duckdb.DuckDBPyRelation)
    assert relation.columns == ["title", "comedy"]
    assert len(relation.fetchall()) == 3
    assert con.last_result.stats.totals()["prompts_evaluated"] == 2
    con.sql("CREATE TABLE t AS SELECT 1 AS x")
    assert con.sql("SELECT x FROM t").fetchall() == [(1,)]
    explanation = con.explain("SELECT name FROM customers WHERE AI.IF(PROMPT('{profile} likes tea'))")
    described = explanation.to_dict()
    node = described["statements"][0]["ai_nodes"][0]
    assert node["plan"]["prompts"] == 40 and node["naive"]["prompts"] == 40
    assert node["plan"]["tokens"] < node["naive"]["tokens"] and node["plan"]["usd"] > 0
    functions = con.register_functions()
    assert con.duckdb.execute("SELECT ai_if('Is Alien a comedy?')").fetchall()[0][0] in (True, False)
    assert functions.session is con.session
    con.close()


def test_functions_work_from_cursors_and_threads(tiny_engine):
    """Registered once, the functions answer on every cursor of the database; registering from
    eight cursors in eight threads is harmless."""
    import threading

    con = duckdb.connect()
    aisql.register(con, engine=tiny_engine, cache=False)
    expected = con.execute("SELECT ai_if('Is tea hot?'), ai_generate('Say hi', 3)").fetchall()
    assert con.cursor().sql("SELECT ai_if('Is tea hot?'), ai_generate('Say hi', 3)").fetchall() == expected
    errors, answers = [], []

    def worker():
        try:
            cursor = con.cursor()
            aisql.register(cursor, engine=tiny_engine, cache=False)
            answers.append(cursor.execute("SELECT ai_if('Is tea hot?')").fetchall())
        except Exception as err:  # noqa: BLE001 - collected for the assertion
            errors.append(err)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == [] and answers == [[(expected[0][0],)]] * 8


@pytest.mark.parametrize("drop", ["cur.close()", "del cur; gc.collect()"])
@pytest.mark.slow  # over ~2.5 s: the fast tier stays under 3 min
def test_functions_outlive_the_cursor_that_registered_them(drop):
    """DuckDB frees a Python function's callable with the connection that created it while the
    catalog keeps pointing at it: closing (or collecting) the registering cursor used to make the
    next call on the parent connection segfault. Run in a child process: a crash must fail the
    test, not the test run."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        f"""
        import gc, duckdb, aisql
        con = duckdb.connect()
        cur = con.cursor()
        aisql.register(cur, model="tiny", cache=False)
        {drop}
        print(con.sql("SELECT ai_if('x') IS NOT NULL, prompt('a {{0}}', 1)").fetchall())
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[(True, 'a 1')]"
