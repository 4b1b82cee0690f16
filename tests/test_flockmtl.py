"""FlockMTL's SQL as its documentation writes it (aisql.sql.flockmtl): llm_filter, llm_complete,
llm_embedding and llm_reduce run as AI.IF, AI.GENERATE, AI.EMBED and AI_AGG — planned, equal to
naive and to the same question written in aisql's own spelling; named prompts from CREATE PROMPT;
a model named in the query is answered by the run's model, said in a note."""

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
    assert "llm_" not in " ".join(node.function for node in planned.stats.nodes)  # run as aisql's own functions


def test_llm_filter_is_the_same_question_as_ai_if(make_connection):
    flock = make_connection().run(FILTER)
    native = make_connection().run(NATIVE_FILTER)
    assert _rows(flock) == _rows(native)
    assert flock.stats.notes == ["llm_filter: model 'gpt-4' named in the query; answered by the run's model (--model)"]


def test_named_prompts_and_models_from_create_statements(make_connection):
    script = (
        "CREATE PROMPT('eco', 'Is this product eco-friendly?');\n"
        "CREATE MODEL('judge', 'gpt-4o', 'openai');\n"
        + FILTER.replace("{'prompt': 'Is this product eco-friendly?'}", "{'prompt_name': 'eco'}")
    )
    result = make_connection().run(script)
    assert _rows(result) == _rows(make_connection().run(NATIVE_FILTER))
    assert "CREATE MODEL 'judge' accepted: aisql answers with the run's model (--model)" in result.stats.notes
    updated = make_connection().run(script.replace("CREATE MODEL", "UPDATE PROMPT('eco', 'Is this product cheap?');\nCREATE MODEL"))
    assert updated.stats.nodes[0].function.startswith("AI.IF(PROMPT('Is this product cheap?")


@pytest.mark.parametrize(
    "sql, message, position",
    [
        ("SELECT id FROM products\nWHERE llm_first({'model_name': 'x'}, {'prompt': 'best'}, {'n': name})", "FlockMTL's llm_first is not supported yet", (2, 7)),
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
