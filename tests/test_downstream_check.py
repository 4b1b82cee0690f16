"""The SQL around an AI call, tried on every answer the call can give, before the first prompt
(aisql.executor.node.downstream); and Snowflake's `:labels` path on AI_CLASSIFY read on the
OBJECT Snowflake returns (aisql.sql.snowflake_variants)."""

from __future__ import annotations

import pytest

from aisql.errors import AisqlError

POSTS = "CREATE TABLE posts AS SELECT * FROM (VALUES (1, 'I flew to Rome for a week'), (2, 'Slow-cooked ragu: my recipe')) v(id, body)"


@pytest.fixture
def con(make_connection):
    connection = make_connection()
    connection.duckdb.execute(POSTS)
    return connection


def _asked(engine, run) -> int:
    before = engine.stats.copy()
    try:
        run()
    except AisqlError:
        pass
    work = engine.stats.since(before)
    return work.score_requests + work.generate_requests


@pytest.mark.parametrize(
    ("sql", "says"),
    [
        ("SELECT id, CAST(AI.CLASSIFY(body, ['travel', 'cooking']) AS INTEGER) + 1 AS n FROM posts", "Could not convert string 'travel'"),
        ("SELECT id, json_extract(AI.CLASSIFY(body, ['travel', 'cooking']), '$.labels[0]') AS l FROM posts", "Malformed JSON"),
        ("SELECT id FROM posts WHERE CAST(AI.IF(PROMPT('Travel? {0}', body)) AS DATE) > DATE '2020-01-01'", "BOOLEAN -> DATE"),
        ("SELECT id, CAST(CAST(AI.SCORE(PROMPT('How tasty, from 1 to 5? {0}', body)) AS VARCHAR) AS DATE) AS s FROM posts", '"1.0"'),
    ],
)
def test_post_ai_sql_that_fails_for_every_answer_is_refused_before_any_prompt(con, tiny_engine, sql, says):
    with pytest.raises(AisqlError) as caught:
        con.run(sql)
    assert says in caught.value.message and "nothing was asked" in caught.value.message
    assert caught.value.line == 1 and caught.value.col is not None
    assert _asked(tiny_engine, lambda: con.run(sql)) == 0


def test_post_ai_sql_that_one_answer_passes_still_runs(con, tiny_engine):
    """'1' converts: the query may succeed, so it runs (and fails on a row only if the model says 'x')."""
    sql = "SELECT id, upper(AI.CLASSIFY(body, ['travel', 'cooking'])) || '!' AS l, TRY_CAST(AI.CLASSIFY(body, ['1', 'x']) AS INT) AS n FROM posts ORDER BY id"
    rows = con.run(sql).table.to_pylist()
    assert [r["l"] in ("TRAVEL!", "COOKING!") for r in rows] == [True, True]


def test_snowflake_labels_path_reads_the_object_snowflake_returns(con):
    plain = [r["c"] for r in con.run("SELECT AI_CLASSIFY(body, ['travel', 'cooking']) AS c FROM posts ORDER BY id", dialect="snowflake").table.to_pylist()]
    first = con.run("SELECT AI_CLASSIFY(body, ['travel', 'cooking']):labels[0]::string AS c FROM posts ORDER BY id", dialect="snowflake")
    assert [r["c"] for r in first.table.to_pylist()] == plain
    listed = con.run("SELECT AI_CLASSIFY(body, ['travel', 'cooking']):labels AS c FROM posts ORDER BY id", dialect="snowflake")
    assert [r["c"] for r in listed.table.to_pylist()] == [f'["{label}"]' for label in plain]
    multi = con.run("SELECT AI_CLASSIFY(body, ['travel', 'cooking'], {'output_mode': 'multi'}):labels AS c FROM posts ORDER BY id", dialect="snowflake")
    assert all(r["c"].startswith("[") for r in multi.table.to_pylist())


def test_snowflake_variant_string_is_the_string_not_its_json(con):
    """`x:path::string` is the value, without JSON's quotes (sqlglot writes a cast that keeps them)."""
    con.duckdb.execute("""CREATE TABLE j AS SELECT '{"a": "b"}'::JSON AS x""")
    assert con.run("SELECT x:a::string AS v FROM j", dialect="snowflake").table.to_pylist() == [{"v": "b"}]
