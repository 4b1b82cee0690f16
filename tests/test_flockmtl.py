"""FlockMTL's SQL as its documentation writes it (aisql.sql.flockmtl): llm_filter, llm_complete,
llm_embedding and llm_reduce run as AI.IF, AI.GENERATE, AI.EMBED and AI_AGG, llm_first / llm_last /
llm_rerank as the group's rows ranked by AI.SCORE — planned, equal to naive and to the same
question written in aisql's own spelling; named prompts (and their versions) from CREATE PROMPT;
CREATE SECRET / CREATE MODEL accepted with a note; a model named in the query is answered by the
run's model, said in a note. Examples written from FlockMTL's documentation (docs/docs/)."""

from __future__ import annotations

import pytest

from aisql.errors import AisqlError

FILTER = (
    "SELECT id, name FROM products WHERE id <= 12 AND "
    "llm_filter({'model_name': 'gpt-4'}, {'prompt': 'Is this product eco-friendly?'}, {'name': name, 'description': description})"
)
NATIVE_FILTER = (
    "SELECT id, name FROM products WHERE id <= 12 AND "
    "AI.IF(PROMPT('Is this product eco-friendly?\n\nname: {0}\ndescription: {1}', name, description))"
)


def _rows(result):
    return sorted(map(repr, result.table.to_pylist()))


@pytest.mark.parametrize(
    "sql",
    [
        FILTER,
        "SELECT id, llm_complete({'model_name': 'gpt-4'}, {'prompt': 'A slogan for {it}:'}, {'product': name}) AS slogan FROM products WHERE id <= 5",
        "SELECT category, llm_reduce({'model_name': 'gpt-4'}, {'prompt': 'Summarize these products'}, {'name': name, 'price': price}) AS s "
        "FROM products WHERE id <= 9 GROUP BY category",
    ],
    ids=["llm_filter", "llm_complete", "llm_reduce"],
)
@pytest.mark.slow  # over ~2.5 s: the fast tier stays under 3 min
def test_flockmtl_calls_are_planned_and_equal_naive(make_connection, sql):
    planned = make_connection().run(sql)
    naive = make_connection().run(sql, naive=True)
    assert _rows(planned) == _rows(naive) and planned.table.num_rows > 0
    assert all(node.function.startswith(("llm_filter(PROMPT(", "llm_complete(PROMPT(", "llm_reduce(")) for node in planned.stats.nodes)  # named as written


def test_llm_filter_is_the_same_question_as_ai_if(make_connection):
    flock = make_connection().run(FILTER)
    native = make_connection().run(NATIVE_FILTER)
    assert _rows(flock) == _rows(native)
    assert len(flock.stats.notes) == 1 and flock.stats.notes[0].startswith("llm_filter: the model 'gpt-4' named in the query is answered by this run's model")


def test_named_prompts_and_models_from_create_statements(make_connection):
    script = (
        "CREATE PROMPT('eco', 'Is this product eco-friendly?');\n"
        "CREATE MODEL('judge', 'gpt-4o', 'openai');\n"
        + FILTER.replace("{'prompt': 'Is this product eco-friendly?'}", "{'prompt_name': 'eco'}")
    )
    result = make_connection().run(script)
    assert _rows(result) == _rows(make_connection().run(NATIVE_FILTER))
    assert any(note.startswith("CREATE MODEL 'judge' accepted") for note in result.stats.notes)
    updated = make_connection().run(script.replace("CREATE MODEL", "UPDATE PROMPT('eco', 'Is this product cheap?');\nCREATE MODEL"))
    assert updated.stats.nodes[0].function.startswith("llm_filter(PROMPT('Is this product cheap?")


@pytest.mark.parametrize(
    "sql, message, position",
    [
        ("SELECT id FROM products\nWHERE llm_complete_json({'model_name': 'x'}, {'prompt': 'best'}, {'n': name})", "FlockMTL's llm_complete_json is not supported yet", (2, 7)),
        ("SELECT llm_filter({'model_name': 'x'}, {'prompt': 'y', 'context_columns': [{'name': 'n'}]}) FROM products", "each context column needs 'data'", (1, 8)),
        ("SELECT llm_filter({'model_name': 'x'}, {'prompt': 'y', 'context_columns': [{'data': name, 'type': 'image'}]}) FROM products", "image context columns", (1, 8)),
        ("CREATE PROMPT('p', 'a');\nSELECT llm_filter({'model_name': 'x'}, {'prompt_name': 'p', 'version': 2, 'context_columns': [{'data': name}]}) FROM products", "prompt 'p' has no version 2 (it has 1)", (2, 8)),
        ("SELECT llm_filter({'model_name': 'x'}, {'prompt_name': 'nope'}, {'n': name}) FROM products", "llm_filter: no prompt named 'nope'", (1, 8)),
        ("SELECT llm_filter('x', 'y') FROM products", "llm_filter takes structs", (1, 8)),
        ("SELECT llm_complete({'model_name': 'x'}, {'text': 'y'}) FROM products", "needs 'prompt' (a string) or 'prompt_name'", (1, 8)),
    ],
)
def test_what_is_not_read_is_one_located_error(make_connection, sql, message, position):
    with pytest.raises(AisqlError) as err:
        make_connection().run(sql)
    assert message in err.value.message and (err.value.line, err.value.col) == position


def test_llm_embedding_is_ai_embed(make_connection):
    pytest.importorskip("sentence_transformers", reason="AI.EMBED needs the embed extra")
    from aisql.engine.backends.embedding import resolve_embed_model

    try:
        resolve_embed_model()
    except AisqlError as err:
        pytest.skip(f"no embedding model here: {err.message}")
    flock = make_connection().run("SELECT id, llm_embedding({'model_name': 'text-embedding-3-small'}, {'text': name}) AS e FROM products WHERE id <= 3")
    native = make_connection().run("SELECT id, AI.EMBED(name) AS e FROM products WHERE id <= 3")
    assert flock.table.to_pylist() == native.table.to_pylist()


# ---- the current spelling: columns as context_columns in the prompt struct (FlockMTL's docs) ----
CONTEXT_FILTER = (
    "SELECT id, name FROM products WHERE id <= 12 AND llm_filter({'model_name': 'gpt-4o'}, "
    "{'prompt': 'Is this product eco-friendly?', 'context_columns': [{'data': name}, {'data': description, 'name': 'description'}]})"
)


def test_context_columns_are_the_same_question(make_connection):
    assert _rows(make_connection().run(CONTEXT_FILTER)) == _rows(make_connection().run(NATIVE_FILTER))


RANKED = "{'model_name': 'gpt-4o'}, {'prompt': 'eco-friendly', 'context_columns': [{'data': name}, {'data': price}]}"


@pytest.mark.parametrize("function", ["llm_first", "llm_last", "llm_rerank"])
def test_ranking_functions_rank_by_each_rows_relevance(make_connection, function):
    """llm_first / llm_last: the row of highest / lowest AI.SCORE relevance as a JSON object of its
    context columns; llm_rerank: every row, most relevant first. Checked against the scores
    themselves, per group, planned and naive."""
    import json

    sql = f"SELECT category, {function}({RANKED}) AS r FROM products WHERE id <= 12 GROUP BY category ORDER BY category"
    planned = make_connection().run(sql)
    assert planned.table.to_pylist() == make_connection().run(sql, naive=True).table.to_pylist()
    scores = make_connection().run(
        "SELECT category, name, price, AI.SCORE(PROMPT('Rate from 1 to 10 how relevant this row is to: eco-friendly\n\nname: {0}\nprice: {1}', name, price), "
        "{'scale': [1, 10]}) AS s FROM products WHERE id <= 12"
    ).table.to_pylist()
    for row in planned.table.to_pylist():
        group = sorted(
            (r for r in scores if r["category"] == row["category"]),
            key=lambda r: (-r["s"], json.dumps({"name": r["name"], "price": r["price"]}, separators=(",", ":"))),
        )
        objects = [{"name": r["name"], "price": r["price"]} for r in group]
        value = json.loads(row["r"])
        if function == "llm_rerank":
            assert value == objects
        else:
            assert value in objects
            best = group[0]["s"] if function == "llm_first" else group[-1]["s"]
            assert next(r["s"] for r in group if {"name": r["name"], "price": r["price"]} == value) == best
    assert planned.stats.nodes[0].function.startswith(f"{function}(PROMPT('Rate from 1 to 10")


def test_resource_statements_as_flockmtl_writes_them(make_connection):
    """CREATE SECRET (TYPE OPENAI, ...) is accepted with a note and never read; DELETE PROMPT 'x'
    drops a prompt; each resource statement answers one row; UPDATE PROMPT makes version 2."""
    con = make_connection()
    result = con.run(
        "CREATE SECRET (\n    TYPE OPENAI,\n    API_KEY 'your-api-key'\n);\n"
        "CREATE PERSISTENT SECRET (TYPE OLLAMA, API_URL '127.0.0.1:11434');\n"
        "CREATE PROMPT('eco', 'Is this product eco-friendly?');\n"
        "UPDATE PROMPT('eco', 'Is this product cheap?');\n"
        "SELECT id FROM products WHERE id <= 6 AND llm_filter({'model_name': 'gpt-4o', 'secret_name': 'k'}, "
        "{'prompt_name': 'eco', 'version': 1, 'context_columns': [{'data': name}, {'data': description, 'name': 'description'}]})"
    )
    native = make_connection().run(NATIVE_FILTER.replace("id <= 12", "id <= 6").replace("SELECT id, name", "SELECT id"))
    assert _rows(result) == _rows(native)
    assert sum("CREATE SECRET (TYPE" in note and "ignored" in note for note in result.stats.notes) == 2
    assert [table.to_pylist() for _, table in result.results[:4]] == [
        [{"flockmtl": "secret of type OPENAI ignored"}], [{"flockmtl": "secret of type OLLAMA ignored"}],
        [{"flockmtl": "prompt 'eco' version 1"}], [{"flockmtl": "prompt 'eco' version 2"}],
    ]
    deleted = make_connection().run("CREATE PROMPT('eco', 'x');\nDELETE PROMPT 'eco';\nSELECT 1")
    assert deleted.results[1][1].to_pylist() == [{"flockmtl": "prompt 'eco' deleted"}]
    with pytest.raises(AisqlError, match="no prompt named 'eco'"):
        make_connection().run("CREATE PROMPT('eco', 'x');\nDELETE PROMPT 'eco';\nSELECT llm_filter({'model_name': 'm'}, {'prompt_name': 'eco'}) FROM products")


def test_named_prompts_live_across_a_connections_statements(make_connection):
    """The shell and a Python connection run one statement at a time: a prompt created by one is
    there for the next, as in a FlockMTL session."""
    con = make_connection()
    assert con.run("CREATE PROMPT('eco', 'Is this product eco-friendly?')").table.to_pylist() == [{"flockmtl": "prompt 'eco' version 1"}]
    named = con.run(FILTER.replace("{'prompt': 'Is this product eco-friendly?'}", "{'prompt_name': 'eco'}"))
    assert _rows(named) == _rows(make_connection().run(NATIVE_FILTER))
    with pytest.raises(AisqlError, match="no prompt named 'eco'"):
        make_connection().run(FILTER.replace("{'prompt': 'Is this product eco-friendly?'}", "{'prompt_name': 'eco'}"))


@pytest.mark.parametrize("function", ["llm_first", "llm_last"])
def test_a_row_never_scored_is_never_first_or_last(make_connection, function):
    """Issue 58, cause 11: a row whose context is NULL has no relevance (AI.SCORE of NULL is NULL);
    llm_first / llm_last pick among the scored rows only, and a group with no scored row is NULL —
    however the unscored row's text compares (the NULL relevance sorted above every number)."""
    import json

    con = make_connection()
    con.duckdb.execute(
        "CREATE TABLE items AS SELECT * FROM (VALUES (1, 'g', 'bamboo toothbrush'), (2, 'g', NULL), (3, 'g', 'plastic straw'), "
        "(4, 'h', NULL), (5, 'h', NULL)) t(id, grp, name)"
    )
    ranked = "{'model_name': 'gpt-4o'}, {'prompt': 'eco-friendly', 'context_columns': [{'data': name}]}"
    rows = con.run(f"SELECT grp, {function}({ranked}) AS r FROM items GROUP BY grp ORDER BY grp").table.to_pylist()
    scored = con.run(
        "SELECT name, AI.SCORE(PROMPT('Rate from 1 to 10 how relevant this row is to: eco-friendly\n\nname: {0}', name), "
        "{'scale': [1, 10]}) AS s FROM items WHERE grp = 'g'"
    ).table.to_pylist()
    assert [r["s"] is None for r in scored] == [r["name"] is None for r in scored]
    named = sorted((r for r in scored if r["s"] is not None), key=lambda r: (-r["s"], json.dumps({"name": r["name"]})))
    expected = named[0] if function == "llm_first" else named[-1]
    assert json.loads(rows[0]["r"]) == {"name": expected["name"]}
    assert rows[1] == {"grp": "h", "r": None}
    assert rows == con.run(f"SELECT grp, {function}({ranked}) AS r FROM items GROUP BY grp ORDER BY grp", naive=True).table.to_pylist()


def test_resource_statements_after_comments_and_with_quoted_names(make_connection):
    """Issue 58, cause 10: FlockMTL's statements are recognised as written in a script — after a
    comment (line or block), a secret with a quoted name — and a later use finds the prompt."""
    con = make_connection()
    result = con.run(
        "-- the secret for the API\nCREATE SECRET \"my key\" (TYPE OPENAI, API_KEY 'k');\n"
        "/* the question */ CREATE PROMPT('eco', 'Is this product ' || 'eco-friendly?');\n"
        "-- first\n-- second\nUPDATE PROMPT('eco', 'Is this product cheap?');\n"
        + FILTER.replace("{'prompt': 'Is this product eco-friendly?'}", "{'prompt_name': 'eco', 'version': 1}")
    )
    assert [table.to_pylist() for _, table in result.results[:3]] == [
        [{"flockmtl": "secret of type OPENAI ignored"}], [{"flockmtl": "prompt 'eco' version 1"}], [{"flockmtl": "prompt 'eco' version 2"}],
    ]
    assert _rows(result) == _rows(make_connection().run(NATIVE_FILTER))
    assert con.run("-- which?\nGET PROMPT 'eco'").table.to_pylist() == [{"flockmtl": "Is this product cheap?"}]


@pytest.mark.parametrize(
    "statement, shown",
    [
        ("CREATE PROMPT('eco', 'Is this ' || name)", "name"),
        ("CREATE PROMPT('eco', concat('a', 'b'))", "CONCAT('a', 'b')"),
        ("UPDATE PROMPT('eco', 42)", "42"),
    ],
)
def test_a_prompt_text_that_is_not_text_is_refused_not_half_read(make_connection, statement, shown):
    """Issue 58, cause 10: CREATE PROMPT('q', 'a' || 'b') stored 'a' (only the first quoted piece
    was read); now the arguments are read as DuckDB reads them — concatenated literals are one
    text, anything else one error naming it and its position, and nothing is stored."""
    con = make_connection()
    with pytest.raises(AisqlError, match="its arguments are text in quotes") as err:
        con.run(f"SELECT 1;\n  {statement};")
    assert shown in err.value.message and (err.value.line, err.value.col) == (2, 3)
    with pytest.raises(AisqlError, match="no prompt named 'eco'"):
        con.run(FILTER.replace("{'prompt': 'Is this product eco-friendly?'}", "{'prompt_name': 'eco'}"))


def test_braces_in_a_context_columns_name_are_text(make_connection):
    """Issue 58, cause 10: a context column named '{price}' is shown to the model as '{price}: ...',
    never a placeholder that reads the price column (or fails on a name that is not a column)."""
    sql = (
        "SELECT id FROM products WHERE id <= 6 AND llm_filter({'model_name': 'gpt-4'}, {'prompt': 'Cheap {or} not?', "
        "'context_columns': [{'data': name, 'name': 'the {price}'}, {'data': description, 'name': '{nothing}}'}]})"
    )
    native = (
        "SELECT id FROM products WHERE id <= 6 AND "
        "AI.IF(PROMPT('Cheap {{or}} not?\n\nthe {{price}}: {0}\n{{nothing}}}}: {1}', name, description))"
    )
    flock, plain = make_connection().run(sql), make_connection().run(native)
    assert _rows(flock) == _rows(plain)
    assert flock.stats.nodes[0].function.split("(", 1)[1] == plain.stats.nodes[0].function.split("(", 1)[1]
    assert "the {{price}}: {0}" in flock.stats.nodes[0].function


def test_resource_statements_with_comments_between_their_words_and_other_string_spellings(make_connection):
    """Issue 58, cause 10, more doors: a comment between the words, a trailing comment, a prompt in
    $$...$$ or E'...', lower case; GET of a prompt never declared is one line (it was an internal
    error)."""
    con = make_connection()
    said = con.run(
        "create /* the eco one */ prompt('eco', $$Is this product$$ || E' eco-friendly?') -- v1\n;\n"
        "CREATE\n-- a note\nPROMPT('cheap', 'Is this cheap?');\n"
        "GET /* which */ PROMPT 'eco'"
    )
    assert [table.to_pylist() for _, table in said.results] == [
        [{"flockmtl": "prompt 'eco' version 1"}], [{"flockmtl": "prompt 'cheap' version 1"}], [{"flockmtl": "Is this product eco-friendly?"}],
    ]
    with pytest.raises(AisqlError, match="GET PROMPT: no prompt named 'nope'") as err:
        con.run("SELECT 1;\nGET PROMPT 'nope'")
    assert err.value.line == 2
