"""Parsing and binding: AI function spellings, prompt forms, options, and errors with positions."""

from __future__ import annotations

import re

import pytest

from aisql.errors import AisqlError, BindError, SqlSyntaxError, TemplateError
from aisql.sql import SourceText, bind_statement, parse_script


def bind(sql: str):
    source = SourceText(sql)
    return [bind_statement(s, source, "__t_") for s in parse_script(source)]


def calls(sql: str):
    return [c for b in bind(sql) for c in b.calls]


@pytest.mark.parametrize(
    "spelling, kind",
    [
        ("AI.IF(x)", "IF"),
        ("ai.if(x)", "IF"),
        ("AI_FILTER(x)", "IF"),
        ("ai_if(x)", "IF"),
        ("AI.CLASSIFY(x, ['a', 'b'])", "CLASSIFY"),
        ("AI_CLASSIFY(x, ['a', 'b'])", "CLASSIFY"),
        ("AI.CLASSIFY(x, categories => ['a', 'b'])", "CLASSIFY"),
        ("AI.GENERATE(x)", "GENERATE"),
        ("AI_COMPLETE(x)", "GENERATE"),
        ("AI_GENERATE(x, max_tokens => 3)", "GENERATE"),
    ],
)
def test_spellings(spelling, kind):
    (call,) = calls(f"SELECT {spelling} FROM t")
    assert call.function.name == kind


def test_bound_sql_replaces_calls_with_casted_arguments():
    (bound,) = bind("SELECT c.id FROM customers c JOIN products p ON AI.IF(PROMPT('{c.profile} buys {p.description}'))")
    sql = bound.sql()
    assert "AI.IF" not in sql and "PROMPT" not in sql
    assert 'CAST("c"."profile" AS TEXT)' in sql and 'CAST("p"."description" AS TEXT)' in sql


def test_table_name_qualifier_resolves_to_alias():
    (call,) = calls("SELECT 1 FROM customers AS c WHERE AI.IF(PROMPT('{customers.profile} is nice'))")
    assert call.args[0].sql() == '"c"."profile"'


def test_positional_and_named_mixed():
    (call,) = calls("SELECT AI.IF(PROMPT('{0} and {name} and {0}', upper(x))) FROM t")
    assert [a.sql() for a in call.args] == ["UPPER(x)", '"name"']
    assert call.template.render(["A", "B"]) == "A and B and A"


def test_double_quoted_template():
    (call,) = calls('SELECT AI.IF(PROMPT("{a} is {{ok}}")) FROM t')
    assert call.template.text == "{a} is {{ok}}"


@pytest.mark.parametrize(
    "literal, text",
    [
        ("$$Is {a} a 'comedy'?$$", "Is {a} a 'comedy'?"),
        ("$q$Is {a} a $$comedy$$?$q$", "Is {a} a $$comedy$$?"),
        ("E'Is {a}\\na comedy?\\t'", "Is {a}\na comedy?\t"),
        ("e'it\\'s {a}'", "it's {a}"),
    ],
)
def test_dollar_quoted_and_escape_strings_are_templates(literal, text):
    """DuckDB's $$...$$ and E'...' are string literals (were refused: "must be a string literal")."""
    (call,) = calls(f"SELECT AI.IF(PROMPT({literal})) FROM t")
    assert call.template.text == text
    (labelled,) = calls(f"SELECT AI.CLASSIFY(a, [{literal}, 'other']) FROM t")
    assert labelled.options.labels == (text, "other")


def test_a_bigquery_bytes_literal_is_no_template():
    def bigquery(sql: str):
        source = SourceText(sql)
        return [c for s in parse_script(source, "bigquery") for c in bind_statement(s, source, "__t_").calls]

    with pytest.raises(TemplateError, match="must be a string literal"):
        bigquery("SELECT AI.IF(PROMPT(b'{a} is fine')) FROM t")
    (call,) = bigquery("SELECT AI.IF(PROMPT(r'{a} is \\fine')) FROM t")
    assert call.template.text == "{a} is \\fine"


def test_expression_prompt_uses_identity_template():
    (call,) = calls("SELECT AI.IF('Is ' || title || ' a comedy?') FROM t")
    assert call.template.text == "{0}" and call.args[0].sql() == "'Is ' || title || ' a comedy?'"


def test_labels_and_max_tokens():
    first, second = calls("SELECT AI.CLASSIFY(x, ['yes', 'no', 'maybe']), AI.GENERATE(x, max_tokens => 7) FROM t")
    assert first.options.labels == ("yes", "no", "maybe")
    assert second.options.max_tokens == 7


def test_default_max_tokens():
    (call,) = calls("SELECT AI.GENERATE(x) FROM t")
    assert call.options.max_tokens == 128


def test_options_hints():
    (call,) = calls("SELECT 1 FROM t WHERE AI.IF(x, {'selectivity': 0.1})")
    assert call.hints == {"selectivity": 0.1}


def test_nested_calls_bind_inner_first():
    outer, inner = calls("SELECT AI.IF(PROMPT('{0} ok', AI.GENERATE(PROMPT('say {x}'), max_tokens => 2))) FROM t")
    assert outer.id == "ai_1" and inner.id == "ai_2"
    assert inner.function_name.upper() in outer.args[0].sql().upper()


def test_ids_follow_written_order():
    ids = [c.template.text for c in calls("SELECT 1 FROM t WHERE AI.IF(PROMPT('a {x}')) AND y > 1 AND AI.IF(PROMPT('b {x}'))")]
    assert ids == ["a {x}", "b {x}"]


def test_multiple_statements_keep_their_text():
    bound = bind("CREATE TABLE x AS SELECT 1 AS a; SELECT AI.IF(PROMPT('{a}')) FROM x")
    assert [b.has_ai for b in bound] == [False, True]
    assert bound[0].sql().strip() == "CREATE TABLE x AS SELECT 1 AS a"


ERRORS = [
    ("SELECT a FROM t WHERE (", SqlSyntaxError, "syntax error", (1, 23)),
    ("SELECT a\nFROM t\nWHERE b = 'x", SqlSyntaxError, "unterminated string", (3, 11)),
    ("SELECT AI.FOO(x) FROM t", BindError, "unknown AI function AI.FOO", (1, 8)),
    ("SELECT AI.IF() FROM t", BindError, "needs a prompt", (1, 8)),
    ("SELECT AI.CLASSIFY(x) FROM t", BindError, "needs a list of labels", (1, 8)),
    ("SELECT AI.CLASSIFY(x, 'a') FROM t", BindError, "labels must be a list", (1, 8)),
    ("SELECT AI.CLASSIFY(x, [1, 2]) FROM t", BindError, "labels must be strings, got 1", (1, 8)),
    ("SELECT AI.CLASSIFY(x, []) FROM t", BindError, "at least two labels", (1, 8)),
    ("SELECT AI.CLASSIFY(x, ['a', 'a']) FROM t", BindError, "appears twice", (1, 8)),
    ("SELECT AI.CLASSIFY(x, ['a', ' ']) FROM t", BindError, "a label is empty", (1, 8)),
    ("SELECT AI.GENERATE(x, max_tokens => 0) FROM t", BindError, "max_tokens must be an integer", (1, 8)),
    ("SELECT AI.GENERATE(x, max_tokens => 'many') FROM t", BindError, "max_tokens must be an integer", (1, 8)),
    ("SELECT AI.IF(x, colour => 'red') FROM t", BindError, "unknown argument 'colour'", (1, 8)),
    ("SELECT AI.IF(x, {'speed': 1}) FROM t", BindError, "unknown option 'speed'", (1, 8)),
    ("SELECT AI.IF(x, 1, 2) FROM t", BindError, "too many arguments", (1, 8)),
    ("SELECT AI.IF(123) FROM t", BindError, "must be text", (1, 8)),
    ("SELECT AI.IF(PROMPT(x)) FROM t", TemplateError, "must be a string literal", (1, 21)),
    ("SELECT AI.IF(PROMPT('{a')) FROM t", TemplateError, "unclosed '{'", (1, 21)),
    ("SELECT AI.IF(PROMPT('{0} {1}', a)) FROM t", TemplateError, "placeholder {1} has no argument", (1, 26)),
    ("SELECT AI.IF(PROMPT('{0}', a, b)) FROM t", TemplateError, "argument {1} is not used", (1, 31)),
    ("SELECT 1 FROM t AS c\nWHERE AI.IF(PROMPT('ok {x.col}'))", TemplateError, "unknown table or alias 'x'", (2, 24)),
    ("SELECT PROMPT('x {a}') FROM t", BindError, "PROMPT(...) can only be used", (1, 8)),
    ("SELECT AI.IF('a' || PROMPT('{x}')) FROM t", BindError, "must be the whole prompt argument", (1, 21)),
    ("", SqlSyntaxError, "empty", None),
]


@pytest.mark.parametrize("sql, error, message, position", ERRORS, ids=[e[2] for e in ERRORS])
def test_errors_name_problem_and_position(sql, error, message, position):
    with pytest.raises(error, match=re.escape(message)) as info:
        bind(sql)
    if position is not None:
        assert (info.value.line, info.value.col) == position
    assert isinstance(info.value, AisqlError)


@pytest.mark.parametrize(
    "given, bound",
    [("42", 42), ("-7", -7), ("0", 0), ("2.5", 2.5), ("1e+20", 1e20), ("Berlin", "Berlin"),
     # used to become numbers, losing what was written
     ("01234", "01234"), ("007", "007"), ("1_000", "1_000"), ("١٢٣", "١٢٣"), ("+5", "+5"), ("1.50", "1.50"), ("-0", "-0"),
     ("nan", "nan"), ("inf", "inf"), ("9" * 30, "9" * 30)],
)
def test_cli_parameter_values_are_numbers_only_when_nothing_is_lost(given, bound):
    from aisql.sql.parameters import parse_cli_value

    value = parse_cli_value(given)
    assert value == bound and type(value) is type(bound)


def test_a_zip_code_parameter_matches_only_itself():
    import aisql
    from aisql.sql.parameters import parse_cli_value

    con = aisql.connect(model="tiny", cache=False)
    con.duckdb.execute("CREATE TABLE z AS SELECT * FROM (VALUES ('01234'), ('1234')) v(zip)")
    rows = con.run("SELECT zip FROM z WHERE zip = $zip", params={"zip": parse_cli_value("01234")}).table.to_pylist()
    assert rows == [{"zip": "01234"}]
