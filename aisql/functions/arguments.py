"""Argument rules shared by the AI functions, for SQL literals and for runtime values alike.

The binder reads literals out of the AST (`literal_value`) and the DuckDB functions of
`aisql.register` receive values from DuckDB; both pass them through the same checks here, so a
label list or a token budget is valid in one place exactly when it is valid in the other.
"""

from __future__ import annotations

from typing import Any, Sequence

from sqlglot import exp

from aisql.errors import BindError

MAX_MAX_TOKENS = 8192
HINT_KEYS = {"selectivity", "anchor"}


def literal_value(node: exp.Expression) -> Any:
    """The Python value of a literal (string, number, negated number); None for anything else."""
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        inner = literal_value(node.this)
        return -inner if isinstance(inner, (int, float)) else None
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = node.this
        try:
            return int(text)
        except ValueError:
            try:
                return float(text)
            except ValueError:
                return None
    return None


def check_labels(spelling: str, labels: Sequence[str | None]) -> tuple[str, ...]:
    """At least two labels, none NULL, empty or repeated."""
    seen: list[str] = []
    for label in labels:
        if label is None:
            raise BindError(f"{spelling}: a label is NULL in {list(labels)}")
        if not label.strip():
            raise BindError(f"{spelling}: a label is empty")
        if label in seen:
            raise BindError(f"{spelling}: label {label!r} appears twice")
        seen.append(label)
    if len(seen) < 2:
        raise BindError(f"{spelling}: needs at least two labels, got {len(seen)}")
    return tuple(seen)


def read_labels(spelling: str, node: exp.Expression) -> tuple[str, ...]:
    """A label list written in SQL: an array of string literals."""
    if not isinstance(node, exp.Array):
        raise BindError(
            f"{spelling}: labels must be a list of string literals, got {node.sql(dialect='duckdb')}",
            hint="e.g. ['positive', 'negative']",
        )
    for item in node.expressions:
        if not (isinstance(item, exp.Literal) and item.is_string):
            raise BindError(
                f"{spelling}: labels must be string literals, got {item.sql(dialect='duckdb')}",
                hint="e.g. ['positive', 'negative']",
            )
    return check_labels(spelling, [item.this for item in node.expressions])


def check_max_tokens(spelling: str, value: Any, written: str | None = None) -> int:
    """An integer from 1 to MAX_MAX_TOKENS."""
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_MAX_TOKENS:
        shown = written if written is not None else repr(value)
        raise BindError(f"{spelling}: max_tokens must be an integer between 1 and {MAX_MAX_TOKENS}, got {shown}")
    return value


def read_max_tokens(spelling: str, node: exp.Expression) -> int:
    return check_max_tokens(spelling, literal_value(node), node.sql(dialect="duckdb"))


def read_hints(spelling: str, node: exp.Expression) -> dict[str, Any]:
    """The planner hints struct: `{'selectivity': 0.1, 'anchor': 'c'}`."""
    if not isinstance(node, exp.Struct):
        raise BindError(f"{spelling}: options must be a struct literal like {{'selectivity': 0.1}}")
    hints: dict[str, Any] = {}
    for item in node.expressions:
        if not isinstance(item, (exp.PropertyEQ, exp.Slice, exp.Kwarg)):
            raise BindError(f"{spelling}: options must be key: value pairs")
        key = item.this.name.lower()
        if key not in HINT_KEYS:
            raise BindError(f"{spelling}: unknown option {key!r}", hint=f"known options: {', '.join(sorted(HINT_KEYS))}")
        value = literal_value(item.expression)
        if key == "selectivity" and not (isinstance(value, (int, float)) and 0.0 <= float(value) <= 1.0):
            raise BindError(f"{spelling}: option 'selectivity' must be a number between 0 and 1")
        if key == "anchor" and not isinstance(value, str):
            raise BindError(f"{spelling}: option 'anchor' must be a table alias in quotes")
        hints[key] = float(value) if key == "selectivity" else value
    return hints
