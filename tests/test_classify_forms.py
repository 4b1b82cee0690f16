"""AI_CLASSIFY / AI.CLASSIFY as the vendors document them (Snowflake AI_CLASSIFY, BigQuery
AI.CLASSIFY): labels with descriptions, labels from an expression or a subquery, the task
description, and multi-label output (`output_mode` 'multi': one yes/no per category, a list).
Examples written from the vendors' documentation pages, run with --dialect."""

from __future__ import annotations

import pytest

from aisql.errors import AisqlError

POSTS = "CREATE TABLE posts AS SELECT * FROM (VALUES (1, 'I dream of backpacking across South America.'), (2, 'Slow-cooked ragu: my recipe'), (3, 'Best hiking trails near Lima')) v(id, body)"


@pytest.fixture
def con(make_connection):
    connection = make_connection()
    connection.duckdb.execute(POSTS)
    connection.duckdb.execute("CREATE TABLE topics AS SELECT * FROM (VALUES ('travel'), ('cooking')) t(name)")
    return connection


def _column(result, name="c"):
    return [row[name] for row in result.table.to_pylist()]


def test_described_labels_are_listed_with_their_descriptions(con):
    snowflake = con.run("SELECT AI_CLASSIFY(body, [{'label': 'travel', 'description': 'trips and places'}, {'label': 'cooking'}]) AS c FROM posts ORDER BY id", dialect="snowflake")
    bigquery = con.run("SELECT AI.CLASSIFY(body, categories => [('travel', 'trips and places'), ('cooking', '')]) AS c FROM posts ORDER BY id", dialect="bigquery")
    assert set(_column(snowflake)) <= {"travel", "cooking"} and _column(snowflake) == _column(bigquery)
    assert "descriptions ['trips and places', None]" in snowflake.stats.nodes[0].function


def test_labels_from_an_expression_or_a_subquery_equal_the_list(con):
    listed = _column(con.run("SELECT AI.CLASSIFY(body, ['travel', 'cooking']) AS c FROM posts ORDER BY id"))
    assert _column(con.run("SELECT AI.CLASSIFY(body, string_split('travel,cooking', ',')) AS c FROM posts ORDER BY id")) == listed
    assert _column(con.run("SELECT AI.CLASSIFY(body, (SELECT list(name ORDER BY name DESC) FROM topics)) AS c FROM posts ORDER BY id")) == listed
    assert _column(con.run("SELECT AI_CLASSIFY(body, ARRAY_CONSTRUCT('travel', 'cooking')) AS c FROM posts ORDER BY id", dialect="snowflake")) == listed
    with pytest.raises(AisqlError, match="must be the same for every row"):
        con.run("SELECT AI.CLASSIFY(body, [body, 'x']) FROM posts")


def test_task_description_leads_the_instruction(con):
    result = con.run("SELECT AI_CLASSIFY(body, ['travel', 'cooking'], {'task_description': 'The topic of a blog post'}) AS c FROM posts", dialect="snowflake")
    assert "task_description 'The topic of a blog post'" in result.stats.nodes[0].function


@pytest.mark.parametrize(
    "dialect, sql",
    [
        ("snowflake", "SELECT id, AI_CLASSIFY(body, ['travel', 'cooking'], {'output_mode': 'multi'}) AS c FROM posts2 ORDER BY id"),
        ("bigquery", "SELECT id, AI.CLASSIFY(body, categories => ['travel', 'cooking'], output_mode => 'multi') AS c FROM posts2 ORDER BY id"),
        ("duckdb", "SELECT id, AI.CLASSIFY(PROMPT('{0} by {1}', body, author), ['travel', 'cooking'], output_mode => 'multi') AS c FROM posts2 ORDER BY id"),
    ],
)
def test_multi_label_of_a_null_input_is_null_not_no_category(con, dialect, sql):
    """AI.IF on NULL is NULL; so is the list of categories of a NULL input (issue 58: it was [],
    "no category applies"). A NULL placeholder of a PROMPT too; planned equals naive."""
    con.duckdb.execute(
        "CREATE TABLE posts2 AS SELECT * FROM (VALUES (1, 'Backpacking in Peru', 'ana'), (2, NULL, 'bo'), (3, 'Ragu recipe', NULL)) v(id, body, author)"
    )
    rows = con.run(sql, dialect=dialect).table.to_pylist()
    assert rows[1]["c"] is None and isinstance(rows[0]["c"], list)
    assert (rows[2]["c"] is None) == ("author" in sql)  # only the PROMPT reads the author
    assert rows == con.run(sql, dialect=dialect, naive=True).table.to_pylist()


@pytest.mark.parametrize(
    "dialect, sql",
    [
        ("snowflake", "SELECT id, AI_CLASSIFY(body, ['travel', 'cooking', 'sports'], {'output_mode': 'multi'}) AS c FROM posts ORDER BY id"),
        ("bigquery", "SELECT id, AI.CLASSIFY(body, categories => ['travel', 'cooking', 'sports'], output_mode => 'multi') AS c FROM posts ORDER BY id"),
    ],
)
def test_multi_label_is_one_yes_no_per_category(con, dialect, sql):
    """Each category's answer is the AI.IF of the input and that category's question; the list
    holds the categories answered Yes, in the order written; planned equals naive."""
    result = con.run(sql, dialect=dialect)
    assert len(result.stats.nodes) == 3
    assert result.table.to_pylist() == con.run(sql, dialect=dialect, naive=True).table.to_pylist()
    for category in ("travel", "cooking", "sports"):
        alone = con.run(
            "SELECT id, AI.IF(PROMPT('{0}\n\nDoes this belong to the category \"%s\"? Answer Yes or No.', body)) AS c FROM posts ORDER BY id" % category
        )
        for row, yes in zip(result.table.to_pylist(), _column(alone)):
            assert (category in row["c"]) == yes
    assert str(result.table.schema.field("c").type) == "list<l: string>" or "list" in str(result.table.schema.field("c").type)


def test_each_categorys_node_is_named_with_its_category(con):
    """Issue 58, cause 18: a multi-label call's nodes were named by their prompt, cut at 60
    characters before the category's question: three nodes that read alike in the summary and its
    warnings. Each is named with its category, in the user's spelling."""
    sql = (
        "SELECT id, AI_CLASSIFY(PROMPT('A long introduction about the post and its author, then the post itself: {0}', body), "
        "['travel', 'cooking', 'sports'], {'output_mode': 'multi'}) AS c FROM posts ORDER BY id"
    )
    result = con.run(sql, dialect="snowflake")
    names = [node.function for node in result.stats.nodes]
    assert [name.split("(", 1)[0] for name in names] == ["AI_CLASSIFY['travel']", "AI_CLASSIFY['cooking']", "AI_CLASSIFY['sports']"]
    from aisql.output import signal_lines

    said = "\n".join(line for line, _ in signal_lines(result.stats))
    assert all(f"AI_CLASSIFY['{c}']" in said for c in ("travel", "cooking", "sports"))


@pytest.mark.parametrize(
    "sql, message",
    [
        ("SELECT AI_CLASSIFY(body, ['a', 'b'], {'output_mode': 'several'}) FROM posts", "output_mode must be 'single' or 'multi'"),
        ("SELECT AI_CLASSIFY(body, [{'name': 'a'}, 'b']) FROM posts", "needs 'label'"),
        ("SELECT AI.CLASSIFY(body, (SELECT list(name) FROM no_such_table)) FROM posts", "cannot compute the labels"),
    ],
)
def test_bad_forms_are_one_located_error(con, sql, message):
    with pytest.raises(AisqlError) as err:
        con.run(sql, dialect="snowflake")
    assert message in err.value.message and err.value.line == 1


EXAMPLE_POSTS = [("I flew to Lima and hiked for a week", ["travel"]), ("Grandma ragu, slow-cooked", ["cooking"]),
                 ("Street food on a trip through Bangkok", ["travel", "cooking"]), ("A quiet weekend at home", [])]


@pytest.mark.parametrize(
    "dialect, sql",
    [
        (
            "bigquery",
            "SELECT id, AI.CLASSIFY(body, categories => ['travel', 'cooking'], output_mode => 'multi', examples => {pairs}) AS c FROM posts ORDER BY id",
        ),
        (
            "snowflake",
            "SELECT id, AI_CLASSIFY(body, ['travel', 'cooking'], {{'output_mode': 'multi', 'examples': {objects}}}) AS c FROM posts ORDER BY id",
        ),
    ],
)
def test_multi_label_learns_from_examples_one_category_at_a_time(con, dialect, sql):
    """Each category's yes/no question takes the examples with its own label: whether the category
    is among the example's labels (BigQuery's pairs, Snowflake's config objects)."""
    def listed(labels):
        return "[" + ", ".join(f"'{label}'" for label in labels) + "]" if labels else "CAST([] AS VARCHAR[])"

    pairs = "[" + ", ".join(f"('{text}', {listed(labels)})" for text, labels in EXAMPLE_POSTS) + "]"
    objects = "[" + ", ".join(f"{{'input': '{text.replace(chr(39), chr(39) * 2)}', 'labels': {listed(labels)}, 'explanation': 'x'}}" for text, labels in EXAMPLE_POSTS) + "]"
    result = con.run(sql.format(pairs=pairs, objects=objects), dialect=dialect)
    assert len(result.stats.nodes) == 2
    assert all((node.decision or {}).get("source") == "examples" and node.decision["examples"] == 4 for node in result.stats.nodes)
    per_label = [node.decision["per_label"] for node in result.stats.nodes]
    assert per_label == [{"false": 2, "true": 2}, {"false": 2, "true": 2}]  # travel: 2 of 4; cooking: 2 of 4
    assert all(isinstance(row["c"], list) for row in result.table.to_pylist())


def test_snowflake_config_examples_teach_a_single_label_call(con):
    sql = (
        "SELECT id, AI_CLASSIFY(body, ['travel', 'cooking'], {'examples': [{'input': 'I flew to Lima', 'labels': ['travel']}, "
        "{'input': 'Ragu, slow-cooked', 'labels': ['cooking']}, {'input': 'Hiking in Peru', 'labels': ['travel']}, "
        "{'input': 'Baking bread', 'labels': ['cooking']}]}) AS c FROM posts ORDER BY id"
    )
    result = con.run(sql, dialect="snowflake")
    assert result.stats.nodes[0].decision["examples"] == 4
    with pytest.raises(AisqlError, match="one label"):
        con.run("SELECT AI_CLASSIFY(body, ['a', 'b'], {'examples': [{'input': 'x', 'labels': ['a', 'b']}]}) FROM posts", dialect="snowflake")


def test_labels_that_differ_by_row_are_refused_with_the_function_that_takes_them(con):
    with pytest.raises(AisqlError, match="must be the same for every row") as refused:
        con.run("SELECT AI.CLASSIFY(body, [body, 'x']) FROM posts")
    assert refused.value.line == 1 and "ai_classify(text, labels)" in refused.value.hint
