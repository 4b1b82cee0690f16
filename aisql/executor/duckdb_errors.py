"""Turn DuckDB's errors into AisqlErrors that point into the user's SQL text.

DuckDB reports positions in the SQL it was given, which for AI queries is generated SQL. Its
messages do name the offending identifier, so we find that name in the user's statement (or in
a PROMPT placeholder) and report its line and column instead.
"""

from __future__ import annotations

import re

import duckdb
from sqlglot import exp

from aisql.errors import AisqlError, BindError, DataError
from aisql.sql.bind import BoundStatement
from aisql.sql.source import SourceText

_QUOTED = re.compile(r'"([^"]+)"')
_TABLE = re.compile(r"Table with name (\S+) does not exist", re.IGNORECASE)


def translate(err: duckdb.Error, bound: BoundStatement, source: SourceText) -> AisqlError:
    lines = [line for line in str(err).splitlines() if line.strip()]
    first = lines[0] if lines else type(err).__name__
    if "CSV Error" in first:
        return _csv_error(first, lines)
    hint = next((line.strip() for line in lines[1:] if line.startswith(("Candidate", "Did you mean"))), None)
    first = _strip_internal(first)
    kind = BindError if isinstance(err, (duckdb.BinderException, duckdb.CatalogException)) else DataError

    name = _named_identifier(first)
    if name:
        for call in bound.calls:
            for ph, (line, col) in zip(call.template.placeholders, call.arg_positions):
                if not ph.is_positional and name.lower() in (ph.column.lower(), (ph.qualifier or "").lower()):
                    return kind(
                        f"{first} — in PROMPT placeholder {{{ph.text}}} of {call.spelling}",
                        line=line,
                        col=col,
                        hint=hint,
                    )
        line, col = _find_name(bound.statement.ast, name, source)
        if line is not None:
            return kind(first, line=line, col=col, hint=hint)
    if isinstance(err, duckdb.IOException):
        return DataError(first, hint=hint)
    return kind(first, hint=hint)


def _csv_error(first: str, lines: list[str]) -> AisqlError:
    """DuckDB's CSV reader explains itself over many lines: keep the file, the reason, one remedy."""
    path = next((line.split("=", 1)[1].strip() for line in lines if line.strip().startswith("file =")), None)
    reason = next(
        (line.strip() for line in lines[1:] if not line.startswith(("Original Line", "Possible Solution", "  "))),
        "",
    )
    remedy = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("Possible Solution")), None)
    where = f" in {path}" if path else ""
    return DataError(f"{first.replace('Invalid Input Error: ', '')}{where}: {reason}".rstrip(": "), hint=remedy)


def _named_identifier(message: str) -> str | None:
    match = _TABLE.search(message)
    if match:
        return match.group(1)
    match = _QUOTED.search(message)
    return match.group(1) if match else None


def _find_name(ast: exp.Expression, name: str, source: SourceText) -> tuple[int | None, int | None]:
    wanted = name.lower()
    for node in ast.walk():
        if isinstance(node, (exp.Column, exp.Table)) and node.name.lower() == wanted:
            return source.position_of(node)
        if isinstance(node, exp.Column) and node.table.lower() == wanted:
            return source.position_of(node)
        if isinstance(node, exp.Literal) and node.is_string and node.this == name:
            return source.position_of(node)
    return None, None


def _strip_internal(message: str) -> str:
    """Hide aisql's generated function names from messages."""
    return re.sub(r"__aisql_\w+", "AI function", message, flags=re.IGNORECASE)
