from __future__ import annotations

import pytest

from aisql.errors import TemplateError
from aisql.sql.template import Template, parse_template


def test_named_and_positional_placeholders():
    t = parse_template("{c.profile} might buy {0}: {p.description} ({c.profile})")
    assert [(p.qualifier, p.column, p.index) for p in t.placeholders] == [
        ("c", "profile", None),
        (None, None, 0),
        ("p", "description", None),
    ]
    # A placeholder used twice binds one argument once.
    assert t.slots == (0, 1, 2, 0)
    assert t.render(["A", "B", "C"]) == "A might buy B: C (A)"
    assert t.static_prefix == ""


def test_escaped_braces_and_static_prefix():
    t = parse_template("Answer {{yes}} or {{no}}: is {x} good?")
    assert t.static_prefix == "Answer {yes} or {no}: is "
    assert t.render(["tea"]) == "Answer {yes} or {no}: is tea good?"


def test_quoted_names_allow_any_character():
    t = parse_template('{"review/profileName"} wrote {b."beer/name"}')
    assert [(p.qualifier, p.column) for p in t.placeholders] == [(None, "review/profileName"), ("b", "beer/name")]


def test_placeholders_match_case_insensitively():
    t = parse_template("{Name} and {name}")
    assert t.arity == 1


def test_identity_template_renders_value():
    assert Template.identity().render(["hello"]) == "hello"


@pytest.mark.parametrize(
    "text, message",
    [
        ("{a", "unclosed '{'"),
        ("a}", "unmatched '}'"),
        ("{}", "empty placeholder"),
        ("{a.b.c}", "malformed placeholder"),
        ('{"a}', "malformed placeholder"),
        ("{a{b}}", "unexpected '{'"),
    ],
)
def test_malformed_templates(text, message):
    with pytest.raises(TemplateError, match=message):
        parse_template(text)
