"""BigQuery's table-valued generation functions as its documentation writes them
(aisql.sql.table_functions): AI.GENERATE_TEXT / ML.GENERATE_TEXT and AI.GENERATE_TABLE over
`TABLE t` or `(query)`, each row's `prompt` column one AI.GENERATE call — the same answers as the
scalar function, planned equal to naive, the documented output columns."""

from __future__ import annotations

import json

import pytest

from aisql.errors import AisqlError


@pytest.fixture
def bq(make_connection):
    con = make_connection(dialect="bigquery")
    con.duckdb.execute("CREATE SCHEMA shop; CREATE TABLE shop.reviews AS SELECT * FROM (VALUES (1, 'Great phone, lasts two days'), (2, 'Battery died in a week'), (3, 'Great phone, lasts two days')) v(id, review)")
    return con


TEXT = (
    "SELECT id, ml_generate_text_llm_result AS answer, ml_generate_text_status FROM AI.GENERATE_TEXT(MODEL `proj.shop.gemini`, "
    "(SELECT id, CONCAT('Summarize: ', review) AS prompt FROM shop.reviews), STRUCT(TRUE AS flatten_json_output, 12 AS max_output_tokens)) ORDER BY id"
)
SCALAR = "SELECT id, AI.GENERATE(CONCAT('Summarize: ', review), max_tokens => 12) AS answer FROM shop.reviews ORDER BY id"


def test_generate_text_is_ai_generate_per_row(bq):
    result = bq.run(TEXT)
    assert [r["answer"] for r in result.table.to_pylist()] == [r["answer"] for r in bq.run(SCALAR).table.to_pylist()]
    assert {r["ml_generate_text_status"] for r in result.table.to_pylist()} == {""}
    assert result.stats.nodes[0].prompts_unique == 2  # rows 1 and 3 ask the same
    assert result.table.to_pylist() == bq.run(TEXT, naive=True).table.to_pylist()
    assert any("'gemini' named in the query" in note for note in result.stats.notes)


def test_unflattened_result_is_shaped_as_gemini_response_and_ml_spelling(bq):
    sql = (
        "SELECT id, JSON_VALUE(ml_generate_text_result, '$.candidates[0].content.parts[0].text') AS answer "
        "FROM ML.GENERATE_TEXT(MODEL `shop.gemini`, (SELECT id, CONCAT('Summarize: ', review) AS prompt FROM shop.reviews), "
        "STRUCT(12 AS max_output_tokens, 0.0 AS temperature, ['\\n'] AS stop_sequences)) ORDER BY id"
    )
    result = bq.run(sql)
    assert [r["answer"] for r in result.table.to_pylist()] == [r["answer"] for r in bq.run(SCALAR).table.to_pylist()]
    assert any("stop_sequences ignored" in note for note in result.stats.notes)


def test_generate_table_adds_the_schema_columns(bq):
    bq.duckdb.execute("CREATE TABLE shop.prompts AS SELECT id, 'Extract the product and the days from: ' || review AS prompt FROM shop.reviews")
    result = bq.run(
        "SELECT id, product, days, full_response, status FROM AI.GENERATE_TABLE(MODEL `proj.shop.gemini`, TABLE `shop.prompts`, "
        "STRUCT('product STRING, days INT64' AS output_schema, 40 AS max_output_tokens)) ORDER BY id"
    )
    scalar = bq.run("SELECT id, AI.GENERATE(prompt, output_schema => 'product STRING, days INT64', max_tokens => 40) AS g FROM shop.prompts ORDER BY id")
    for row, expected in zip(result.table.to_pylist(), scalar.table.to_pylist()):
        answer = expected["g"] or {"product": None, "days": None}
        assert (row["product"], row["days"]) == (answer["product"], answer["days"])
        assert row["status"] == "" and (row["full_response"] is None or json.loads(row["full_response"]).keys() == {"product", "days"})


def test_generate_table_needs_an_output_schema(bq):
    with pytest.raises(AisqlError) as err:
        bq.run("SELECT * FROM AI.GENERATE_TABLE(MODEL `m`, TABLE `shop.reviews`, STRUCT(10 AS max_output_tokens))")
    assert "needs STRUCT('...' AS output_schema)" in err.value.message and err.value.line == 1


def test_a_generation_over_another_generations_output(bq):
    """Issue 58, cause 12: GENERATE_TEXT over GENERATE_TEXT reached DuckDB as BigQuery's text (the
    outer call copied its input before the inner call was read). Innermost first: the answers are
    those of AI.GENERATE over AI.GENERATE, planned as two nodes, equal to naive."""
    inner = (
        "AI.GENERATE_TEXT(MODEL `m`, (SELECT id, CONCAT('Summarize: ', review) AS prompt FROM shop.reviews), "
        "STRUCT(TRUE AS flatten_json_output, 8 AS max_output_tokens))"
    )
    nested = (
        "SELECT id, ml_generate_text_llm_result AS a FROM AI.GENERATE_TEXT(MODEL `m`, "
        f"(SELECT id, CONCAT('Shorten: ', ml_generate_text_llm_result) AS prompt FROM {inner}), "
        "STRUCT(TRUE AS flatten_json_output, 8 AS max_output_tokens)) ORDER BY id"
    )
    scalar = (
        "SELECT id, AI.GENERATE(CONCAT('Shorten: ', AI.GENERATE(CONCAT('Summarize: ', review), max_tokens => 8)), max_tokens => 8) AS a "
        "FROM shop.reviews ORDER BY id"
    )
    result = bq.run(nested)
    assert result.table.to_pylist() == bq.run(scalar).table.to_pylist()
    assert len(result.stats.nodes) == 2 and result.table.to_pylist() == bq.run(nested, naive=True).table.to_pylist()
    table_over_text = (
        "SELECT id, product FROM AI.GENERATE_TABLE(MODEL `m`, "
        f"(SELECT id, CONCAT('Extract the product: ', ml_generate_text_llm_result) AS prompt FROM {inner}), "
        "STRUCT('product STRING' AS output_schema, 16 AS max_output_tokens)) ORDER BY id"
    )
    assert [r["id"] for r in bq.run(table_over_text).table.to_pylist()] == [1, 2, 3]


def test_settings_are_optional_and_must_be_a_struct(bq):
    """Issue 58, cause 12, the sibling: GENERATE_TEXT over TABLE name without settings was an
    internal error (sqlglot keeps False for the missing STRUCT); now BigQuery's defaults (the
    unflattened JSON result). Settings that are not a STRUCT are one located error."""
    bq.duckdb.execute("CREATE TABLE shop.prompts AS SELECT id, 'Summarize: ' || review AS prompt FROM shop.reviews")
    plain = bq.run("SELECT id, ml_generate_text_result, ml_generate_text_status FROM AI.GENERATE_TEXT(MODEL `m`, TABLE shop.prompts) ORDER BY id")
    assert plain.table.num_rows == 3 and {r["ml_generate_text_status"] for r in plain.table.to_pylist()} == {""}
    with pytest.raises(AisqlError, match=r"AI.GENERATE_TABLE needs STRUCT\('...' AS output_schema\)"):
        bq.run("SELECT * FROM AI.GENERATE_TABLE(MODEL `m`, TABLE shop.prompts)")
