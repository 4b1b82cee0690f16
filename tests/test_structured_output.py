"""Structured output: AI.GENERATE(..., output_schema => ...) and AI_EXTRACT. Every answer parses
to the schema — with random weights (the hardest case for a constraint) and budgets too small for
the model's own document (the decoder closes it by the shortest valid completion) —, planned ==
naive with speculation under the constraint, the result cache, explain, and bad arguments."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisql.engine.decoding.json_constraint import _compiled, _ll_tokenizer
from aisql.engine.decoding.json_document import Field, grammar_of, shortest_completion
from aisql.errors import AisqlError

SCHEMA = "name STRING, year INT64, score FLOAT64, ok BOOL, tags ARRAY<STRING>"
FIELDS = [Field("name", "string"), Field("year", "integer"), Field("score", "number"), Field("ok", "boolean"), Field("tags", "string", True)]
TYPES = {"name": str, "year": int, "score": float, "ok": bool, "tags": list}

_text = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=12)
_document = st.fixed_dictionaries(
    {
        "name": st.none() | _text,
        "year": st.none() | st.integers(-(10**6), 10**6),
        "score": st.none() | st.floats(-1e6, 1e6, allow_nan=False),
        "ok": st.none() | st.booleans(),
        "tags": st.none() | st.lists(_text, max_size=3),
    }
)


@settings(max_examples=60, deadline=None)
@given(_document, st.data())
def test_every_prefix_has_a_shortest_completion_the_grammar_accepts(tiny_engine, document, data):
    """The closing the decoder emits when the budget ends is a document the grammar accepts."""
    from llguidance import LLMatcher

    text = json.dumps({f.name: document[f.name] for f in FIELDS}, separators=(",", ":"))  # the schema's order
    cut = data.draw(st.integers(0, len(text)))
    completed = shortest_completion(text[:cut], FIELDS)
    assert completed.startswith(text[:cut])
    parsed = json.loads(completed)
    assert list(parsed) == [f.name for f in FIELDS]
    tokenizer = _ll_tokenizer(id(tiny_engine.tokenizer), tiny_engine.tokenizer, tuple(tiny_engine.stop_ids))
    matcher = LLMatcher(tokenizer, _compiled(grammar_of(FIELDS)), log_level=0)
    ids = tokenizer.tokenize_str(completed)
    assert matcher.validate_tokens(ids) == len(ids)
    matcher.consume_tokens(ids)
    assert matcher.is_accepting()


ODD_NAMES = ['a"b', "c\\d", "e\nf", "gé", "h😀", "x/y", "\\", "plain"]


@pytest.mark.parametrize("spelling", ["escaped", "raw", "upper-hex"])
def test_field_names_with_quotes_backslashes_and_non_ascii_complete_from_every_prefix(tiny_engine, spelling):
    """Names holding `"`, `\\`, a newline or non-ASCII (written raw or as \\uXXXX, any case)
    used to end in StopIteration or invalid JSON: a key is compared by its decoded text, and
    the names the completion writes are JSON-escaped."""
    import re

    from llguidance import LLMatcher

    fields = [Field(name, "string") for name in ODD_NAMES] + [Field("n", "integer", True)]

    def spelled(name: str) -> str:
        if spelling == "raw":
            return json.dumps(name, ensure_ascii=False)
        text = json.dumps(name)
        return re.sub(r"\\u[0-9a-f]{4}", lambda m: "\\u" + m.group(0)[2:].upper(), text) if spelling == "upper-hex" else text

    values = {f.name: ('v\\"' if f.kind == "string" else [1, 2]) for f in fields}
    document = "{" + ",".join(f"{spelled(name)}:{json.dumps(value, separators=(',', ':'))}" for name, value in values.items()) + "}"
    tokenizer = _ll_tokenizer(id(tiny_engine.tokenizer), tiny_engine.tokenizer, tuple(tiny_engine.stop_ids))
    grammar = _compiled(grammar_of(fields))
    for cut in range(len(document) + 1):
        completed = shortest_completion(document[:cut], fields)
        assert completed.startswith(document[:cut])
        assert sorted(json.loads(completed)) == sorted(values), document[:cut]
        if spelling == "raw" and cut % 5 == 0:  # the grammar's own spelling: it accepts the completion
            matcher = LLMatcher(tokenizer, grammar, log_level=0)
            ids = tokenizer.tokenize_str(completed)
            assert matcher.validate_tokens(ids) == len(ids), completed


def _check(value: dict) -> None:
    assert value is not None, "an answer did not parse"
    assert list(value) == list(TYPES)
    for name, kind in TYPES.items():
        assert value[name] is None or isinstance(value[name], kind), (name, value[name])
    if value["tags"] is not None:
        assert all(isinstance(t, str) for t in value["tags"])


@pytest.mark.parametrize("max_tokens", [48, 96])
@pytest.mark.slow
def test_200_random_weight_generations_all_parse(make_connection, max_tokens):
    """Random weights wander: without a constraint almost nothing would parse. With it, every
    one of 200 answers is a document of the schema, also when max_tokens cuts it (the model's
    shortest document is 47 tokens here, its own documents are mostly longer than 96: the decoder closes them)."""
    con = make_connection()
    result = con.run(
        f"SELECT i, AI.GENERATE('Describe item ' || i, output_schema => '{SCHEMA}', max_tokens => {max_tokens}) AS r "
        "FROM range(200) t(i)"
    )
    values = result.table.column("r").to_pylist()
    assert len(values) == 200
    for value in values:
        _check(value)
    assert result.stats.totals()["generated_tokens"] <= 200 * max_tokens


@pytest.mark.slow  # over ~2.5 s: the fast tier stays under 3 min
def test_planned_equals_naive_with_speculation_under_the_constraint(make_connection):
    sql = (
        f"SELECT id, AI.GENERATE(PROMPT('Extract from: {{review}} {{review}}'), output_schema => '{SCHEMA}', max_tokens => 80) AS r "
        "FROM reviews WHERE id <= 8 ORDER BY id"
    )
    planned = make_connection().run(sql)
    naive = make_connection().run(sql, naive=True)
    assert planned.table.to_pylist() == naive.table.to_pylist()
    assert planned.stats.totals()["draft_tokens"] > 0  # the repeated review gives prompt-lookup drafts


@pytest.mark.slow
def test_struct_fields_nulls_and_the_result_cache(make_connection, tmp_path):
    cache = str(tmp_path / "answers.sqlite")
    sql = (
        "SELECT t, AI.GENERATE(t, output_schema => 'title STRING, year INT64').year AS year, "
        "AI.GENERATE(t, output_schema => 'title STRING, year INT64') AS whole "
        "FROM (VALUES ('Jaws, 1975'), (NULL)) x(t) ORDER BY t NULLS LAST"
    )
    first = make_connection(cache=cache).run(sql)
    rows = first.table.to_pylist()
    assert rows[1]["whole"] is None and rows[1]["year"] is None
    assert set(rows[0]["whole"]) == {"title", "year"}
    assert str(first.table.schema.field("whole").type) == "struct<title: string, year: int64>"
    second = make_connection(cache=cache).run(sql)
    assert second.stats.totals()["prompts_evaluated"] == 0
    assert second.table.to_pylist() == rows


@pytest.mark.slow
def test_extract_snowflake_forms(make_connection):
    con = make_connection()
    forms = [
        "{'product': 'Which product?', 'issues': 'List: what went wrong?'}",
        "['product: Which product?', 'issues: List: what went wrong?']",
        "[['product', 'Which product?'], ['issues', 'List: what went wrong?']]",
        """PARSE_JSON('{"product": "Which product?", "issues": "List: what went wrong?"}')""",  # JSON text, as Snowflake's docs pass it
        """PARSE_JSON('["product: Which product?", "issues: List: what went wrong?"]')""",
    ]
    types = set()
    for form in forms:
        table = con.run(f"SELECT AI_EXTRACT(text => review, responseFormat => {form}) AS r FROM reviews WHERE id <= 3", dialect="snowflake").table
        types.add(str(table.schema.field("r").type))
        for value in table.column("r").to_pylist():
            assert set(value) == {"product", "issues"}
            assert value["issues"] is None or isinstance(value["issues"], list)
    assert len(types) == 1 and next(iter(types)).startswith("struct<product: string, issues: list<")
    questions = con.run("SELECT AI_EXTRACT(review, ['Which product?']) AS r FROM reviews WHERE id = 1").table
    assert str(questions.schema.field("r").type) == "struct<Which product?: string>"


SNOWFLAKE_SCHEMA = (
    "{'schema': {'type': 'object', 'properties': {"
    "'product': {'description': 'Which product is reviewed?', 'type': 'string'}, "
    "'stars': {'description': 'How many stars, 1 to 5?', 'type': 'integer'}, "
    "'issues': {'description': 'What went wrong?', 'type': 'array', 'items': {'type': 'string'}}}}}"
)


@pytest.mark.parametrize("form", [SNOWFLAKE_SCHEMA, "PARSE_JSON('" + SNOWFLAKE_SCHEMA.replace("'", '"') + "')"], ids=["object", "json-string"])
def test_extract_snowflake_json_schema_form(make_connection, form):
    """Snowflake's fourth responseFormat: a JSON schema, whose properties keep their types."""
    table = make_connection().run(f"SELECT AI_EXTRACT(text => review, responseFormat => {form}) AS r FROM reviews WHERE id <= 3", dialect="snowflake").table
    assert str(table.schema.field("r").type) == "struct<product: string, stars: int64, issues: list<l: string>>"
    for value in table.column("r").to_pylist():
        assert value["stars"] is None or isinstance(value["stars"], int)


def test_a_budget_below_the_shortest_document_is_an_error(make_connection):
    with pytest.raises(AisqlError) as err:
        make_connection().run(f"SELECT AI.GENERATE(review, output_schema => '{SCHEMA}', max_tokens => 5) FROM reviews")
    assert "shortest document" in err.value.message and err.value.line == 1


def test_explain_counts_the_output_tokens(make_connection):
    con = make_connection()
    nodes = con.explain(f"SELECT AI.GENERATE(review, output_schema => '{SCHEMA}', max_tokens => 30) FROM reviews").to_dict()["statements"][0]["ai_nodes"]
    assert nodes[0]["plan"]["tokens"] > 0 and "output_schema" in nodes[0]["function"]


@pytest.mark.parametrize(
    "sql, message",
    [
        ("SELECT AI.GENERATE(review, output_schema => 'name DATE') FROM reviews", "cannot decode"),
        ("SELECT AI.GENERATE(review, output_schema => 'name') FROM reviews", "output_schema"),
        ("SELECT AI.GENERATE(review, output_schema => '') FROM reviews", "output_schema is empty"),
        # sqlglot reads up to the first thing it cannot and drops the rest: these had one field
        ("SELECT AI.GENERATE(review, output_schema => 'a STRING b INT64') FROM reviews", "unexpected 'b' at character 10"),
        ("SELECT AI.GENERATE(review, output_schema => 'a STRING, b c') FROM reviews", "unexpected 'b' at character 11"),
        ("SELECT AI.GENERATE(review, output_schema => 'a STRING, b') FROM reviews", "unexpected 'b'"),
        ("SELECT AI.GENERATE(review, output_schema => 3) FROM reviews", "must be a string literal"),
        ("SELECT AI.GENERATE(review, output_schema => 'a STRING, A INT64') FROM reviews", "appears twice"),
        ("SELECT AI.GENERATE(review, output_schema => 'a STRING', temperature => 0.5) FROM reviews", "decodes greedily"),
        ("SELECT AI_EXTRACT(review) FROM reviews", "needs a response format"),
        ("SELECT AI_EXTRACT(file => review, responseFormat => ['a?']) FROM reviews", "file =>"),
        ("SELECT AI_EXTRACT(review, {'schema': 'x'}) FROM reviews", "the schema needs 'properties'"),
        ("SELECT AI_EXTRACT(review, {'schema': {'type': 'object', 'properties': {'t': {'type': 'object'}}}}) FROM reviews", "has type 'object'"),
        ("SELECT AI_EXTRACT(review, 'what?') FROM reviews", "must be an object or an array"),
    ],
)
def test_bad_arguments(make_connection, sql, message):
    with pytest.raises(AisqlError) as err:
        make_connection().run(sql)
    assert message in err.value.message
    assert err.value.line == 1


@pytest.mark.slow
def test_extract_nulls_planned_equals_naive_cache_and_explain(make_connection, tmp_path):
    cache = str(tmp_path / "answers.sqlite")
    sql = (
        "SELECT id, AI_EXTRACT(CASE WHEN id % 4 = 0 THEN NULL ELSE review END, {'product': 'Which product?', 'issues': 'List: what went wrong?'}) AS r "
        "FROM reviews WHERE id <= 8 ORDER BY id"
    )
    planned = make_connection(cache=cache).run(sql)
    rows = planned.table.to_pylist()
    assert [r["r"] is None for r in rows] == [r["id"] % 4 == 0 for r in rows]  # NULL text: NULL, never asked
    assert make_connection().run(sql, naive=True).table.to_pylist() == rows
    again = make_connection(cache=cache).run(sql)
    assert again.stats.totals()["prompts_evaluated"] == 0 and again.table.to_pylist() == rows
    node = make_connection().explain(sql).to_dict()["statements"][0]["ai_nodes"][0]
    assert node["prompts_unique"] == planned.stats.totals()["prompts_unique"] and node["plan"]["tokens"] > 0


def test_a_cached_struct_is_accepted_only_in_the_schema_shape():
    """What the result cache accepts for a STRUCT answer (aisql.executor.store.cache reads the rest as
    misses): exactly what value_from_json returns for the fields."""
    from aisql.engine.decoding.json_document import Field
    from aisql.functions.structured_output import fits, value_from_json

    fields = (Field("name", "string"), Field("year", "integer"), Field("tags", "string", array=True), Field("ok", "boolean"))
    assert fits(fields, value_from_json(fields, '{"name": "A", "year": 1999, "tags": ["x"], "ok": true}'))
    assert fits(fields, {"name": None, "year": None, "tags": None, "ok": None})
    for bad in (
        {"name": "A", "year": "1999", "tags": ["x"], "ok": True},
        {"name": "A", "year": True, "tags": ["x"], "ok": True},
        {"name": "A", "year": 1, "tags": "x", "ok": True},
        {"name": "A", "year": 1, "tags": [1], "ok": True},
        {"name": "A", "year": 1, "tags": [], "ok": 1},
        {"name": "A", "year": 1, "tags": []},
        {"year": 1, "name": "A", "tags": [], "ok": True},
        ["A", 1, [], True],
    ):
        assert not fits(fields, bad), bad


def test_nested_struct_fields_in_an_output_schema():
    """BigQuery's output_schema with a STRUCT field: its leaves are decoded by path in one flat
    document and read back nested; a name used for a value and a STRUCT is refused."""
    from aisql.errors import BindError
    from aisql.functions.structured_output import fits, parse_output_schema, struct_types, value_from_json

    fields = parse_output_schema("AI.GENERATE", "name STRING, address STRUCT<city STRING, geo STRUCT<lat FLOAT64, lon FLOAT64>>, tags ARRAY<STRING>")
    assert [f.name for f in fields] == ["name", "address.city", "address.geo.lat", "address.geo.lon", "tags"]
    assert struct_types(fields)[0] == 'STRUCT("name" VARCHAR, "address" STRUCT("city" VARCHAR, "geo" STRUCT("lat" DOUBLE, "lon" DOUBLE)), "tags" VARCHAR[])'
    value = value_from_json(fields, '{"name": "Ada", "address.city": "Rome", "address.geo.lat": 41.9, "address.geo.lon": 12, "tags": ["x"]}')
    assert value == {"name": "Ada", "address": {"city": "Rome", "geo": {"lat": 41.9, "lon": 12.0}}, "tags": ["x"]}
    assert fits(fields, value) and not fits(fields, {"name": "Ada", "address": None, "tags": None})
    with pytest.raises(BindError, match="appears twice"):
        parse_output_schema("AI.GENERATE", "a STRING, a STRUCT<x STRING>")


@pytest.mark.slow
def test_a_nested_output_schema_runs_end_to_end(make_connection):
    table = make_connection().run(
        "SELECT AI.GENERATE(PROMPT('Who wrote this? {review}'), output_schema => 'author STRUCT<first STRING, last STRING>, year INT64', max_tokens => 60) AS r "
        "FROM reviews WHERE id <= 2", dialect="bigquery"
    ).table
    assert str(table.schema.field("r").type) == "struct<author: struct<first: string, last: string>, year: int64>"
    for value in table.column("r").to_pylist():
        assert set(value) == {"author", "year"} and (value["author"] is None or set(value["author"]) == {"first", "last"})
