"""Query parameters, as DuckDB's API takes them: `?` (in order), `$1` (by position) and `$name`
(by name), with values from `con.sql(query, params=...)` or `aisql run --param name=value`.

A script becomes several SQL statements as it is planned (each AI node's input, the final query,
counts for the planner), so the values are put into the syntax tree as typed literals once,
before planning: a value is a value node, never text pasted into SQL or into a prompt template,
so a value such as `x' OR 1=1 --` stays the string it is.
"""

from __future__ import annotations

import datetime
import decimal
import math
import re
from typing import Any, Mapping, Sequence

from sqlglot import exp

from aisql.errors import BindError

Parameters = Sequence[Any] | Mapping[str, Any] | None


def bind_parameters(ast: exp.Expression, params: Parameters, state: dict) -> exp.Expression:
    """`ast` with every parameter replaced by its value. `state` carries the position of the next
    `?` across the statements of one script."""
    placeholders = [node for node in ast.walk() if isinstance(node, exp.Placeholder)]
    if not placeholders:
        return ast
    if params is None:
        raise BindError("the query has parameters ($1, ? or $name) but no values were given", hint="pass params=... or --param NAME=VALUE")
    for node in placeholders:
        node.replace(literal(_value_of(node, params, state)))
    return ast


def check_all_used(params: Parameters, state: dict) -> None:
    """Every given value must be used by some parameter (a typo in a name would otherwise go unnoticed)."""
    if params is None:
        return
    used = state.get("used", set())
    if isinstance(params, Mapping):
        unused = [key for key in params if str(key) not in used]
    else:
        unused = [str(i + 1) for i in range(len(params)) if str(i + 1) not in used]
    if unused:
        raise BindError(f"parameter {unused[0]!r} was given but the query does not use it")


def _value_of(node: exp.Placeholder, params: Parameters, state: dict) -> Any:
    name = node.this or ""  # `?` has none (sqlglot's `.name` says "?")
    used = state.setdefault("used", set())
    if not name:  # `?`: the next positional value
        index = state.get("next", 0)
        state["next"] = index + 1
        key = str(index + 1)
    else:
        key = name
    if isinstance(params, Mapping):
        if key not in params:
            raise BindError(f"no value for parameter ${key}", hint=f"give it: --param {key}=VALUE")
        used.add(key)
        return params[key]
    if not key.isdigit() or not 1 <= int(key) <= len(params):
        raise BindError(
            f"no value for parameter {'$' + key if name else '?'} ({len(params)} value(s) given)",
            hint="named parameters ($name) need params as a dict, positional ones (?, $1) a list",
        )
    used.add(key)
    return params[int(key) - 1]


def literal(value: Any) -> exp.Expression:
    """A SQL value node for a Python value, typed as DuckDB binds it."""
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, int):
        return exp.cast(exp.Literal.number(value), "BIGINT") if abs(value) >= 2**31 else exp.Literal.number(value)
    if isinstance(value, float) and not math.isfinite(value):
        return exp.cast(exp.Literal.string(repr(value)), "DOUBLE")
    if isinstance(value, (float, decimal.Decimal)):
        return exp.cast(exp.Literal.number(repr(value) if isinstance(value, float) else str(value)), "DOUBLE")
    if isinstance(value, datetime.datetime):
        return exp.cast(exp.Literal.string(value.isoformat(sep=" ")), "TIMESTAMP")
    if isinstance(value, datetime.date):
        return exp.cast(exp.Literal.string(value.isoformat()), "DATE")
    if isinstance(value, (list, tuple)):
        return exp.Array(expressions=[literal(v) for v in value])
    return exp.Literal.string(str(value))


def parse_cli_value(text: str) -> Any:
    """A --param value: a number only when it is written as that number prints (42, -7, 2.5,
    1e+20 — so reading it as a number loses nothing), else text, as DuckDB binds a Python str.
    `01234`, `1_000`, `١٢٣`, `+5`, `1.50` stay text: a zip code keeps its zero, a PROMPT shows
    what was given. Cast in SQL for other types ($d::DATE)."""
    if _CANONICAL_INTEGER.fullmatch(text) and abs(int(text)) < 2**63:
        return int(text)
    if _NUMBER_CHARACTERS.fullmatch(text):
        try:
            number = float(text)
        except ValueError:
            return text
        if math.isfinite(number) and repr(number) == text:
            return number
    return text


_CANONICAL_INTEGER = re.compile(r"0|-?[1-9][0-9]*", re.ASCII)
_NUMBER_CHARACTERS = re.compile(r"-?[0-9.e+-]+", re.ASCII)
