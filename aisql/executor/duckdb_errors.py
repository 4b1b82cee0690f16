"""Turn DuckDB's errors into AisqlErrors that point into the user's SQL text.

DuckDB reports positions in the SQL it was given, which for AI queries is generated SQL. Its
messages do name the offending identifier, so we find that name in the user's statement (or in
a PROMPT placeholder) and report its line and column instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import duckdb
from sqlglot import exp

from aisql.errors import AisqlError, BindError, DataError
from aisql.sql.bind import BoundStatement
from aisql.sql.source import SourceText

_INTERNAL_NAMES = re.compile(r"sqlite_|pg_|duckdb_|information_schema|__aisql", re.IGNORECASE)


def translate(err: duckdb.Error, bound: BoundStatement, source: SourceText) -> AisqlError:
    lines = [line for line in str(err).splitlines() if line.strip()]
    first = lines[0] if lines else type(err).__name__
    if "CSV Error" in first:
        return _csv_error(first, lines)
    hint = next((line.strip() for line in lines[1:] if line.startswith(("Candidate", "Did you mean"))), None)
    if hint and _INTERNAL_NAMES.search(hint):
        hint = None  # "Did you mean sqlite_master?" helps nobody
    if hint:
        hint = re.sub(r":\s*:", ":", hint)
    if "attached in read-only mode" in first:
        hint = "the database was opened read-only (--read-only, or every statement looked like a read): run with --read-write"
    first = _strip_internal(first)
    kind = BindError if isinstance(err, (duckdb.BinderException, duckdb.CatalogException)) else DataError

    subject = _subject(first)
    if subject is not None:
        for call in bound.calls:
            for ph, (line, col) in zip(call.template.placeholders, call.arg_positions):
                if not ph.is_positional and subject.matches_placeholder(ph.column, ph.qualifier):
                    return kind(
                        f"{first} — in PROMPT placeholder {{{ph.text}}} of {call.spelling}",
                        line=line,
                        col=col,
                        hint=hint,
                    )
        line, col = _find(bound.statement.ast, subject, source)
        if line is not None:
            return kind(first, line=line, col=col, hint=hint)
    if isinstance(err, duckdb.IOException):
        return DataError(first, hint=hint)
    return kind(first, hint=hint)


def file_error(err: duckdb.Error, path) -> AisqlError:
    """A data file DuckDB cannot read (encoding, format, permissions): one line naming it."""
    lines = [line for line in str(err).splitlines() if line.strip()]
    first = lines[0] if lines else type(err).__name__
    if "CSV Error" in first:
        return _csv_error(first, lines)
    return DataError(f"cannot read {path}: {_strip_internal(first)}")


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


@dataclass(frozen=True)
class _Subject:
    """What a DuckDB message is about: a column (maybe of a given table), a table or a function."""

    kind: str  # "column" | "table" | "function" | "name"
    name: str
    qualifier: str | None = None

    def matches_placeholder(self, column: str, qualifier: str | None) -> bool:
        if self.kind == "column":
            same_table = self.qualifier is None or (qualifier or "").lower() == self.qualifier.lower()
            return column.lower() == self.name.lower() and same_table
        if self.kind == "table":
            return (qualifier or "").lower() == self.name.lower()
        return self.kind == "name" and self.name.lower() in (column.lower(), (qualifier or "").lower())


_SUBJECTS = (
    (re.compile(r'Table "(?P<qualifier>[^"]+)" does not have a column named "(?P<name>[^"]+)"'), "column"),
    (re.compile(r'Referenced column "(?P<name>[^"]+)" not found'), "column"),
    (re.compile(r'Ambiguous reference to column name "(?P<name>[^"]+)"'), "column"),
    (re.compile(r'column "(?P<name>[^"]+)" must appear in the GROUP BY', re.IGNORECASE), "column"),
    (re.compile(r"Table with name (?P<name>\S+) does not exist", re.IGNORECASE), "table"),
    (re.compile(r"Function with name (?P<name>\w+) does not exist", re.IGNORECASE), "function"),
    (re.compile(r"argument types '(?P<name>[^(']+)\("), "function"),
    (re.compile(r'"(?P<name>[^"]+)"'), "name"),
)


_OPERATORS = {"+": exp.Add, "-": exp.Sub, "*": exp.Mul, "/": exp.Div, "//": exp.IntDiv, "%": exp.Mod, "||": exp.DPipe}


def _subject(message: str) -> _Subject | None:
    for pattern, kind in _SUBJECTS:
        match = pattern.search(message)
        if match:
            groups = match.groupdict()
            return _Subject(kind, groups["name"], groups.get("qualifier"))
    return None


def _find(ast: exp.Expression, subject: _Subject, source: SourceText) -> tuple[int | None, int | None]:
    """The first place in the user's statement the subject is written."""
    wanted = subject.name.lower()
    qualifier = (subject.qualifier or "").lower()
    for node in ast.walk():
        if subject.kind == "function":
            operator = _OPERATORS.get(wanted)
            if operator is not None and isinstance(node, operator):
                return source.position_of(node)
            if isinstance(node, exp.Func) and (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower() == wanted:
                return source.position_of(node)
            continue
        if subject.kind in ("column", "name") and isinstance(node, exp.Column) and node.name.lower() == wanted:
            if not qualifier or node.table.lower() == qualifier:
                return source.position_of(node)
        if subject.kind in ("table", "name") and isinstance(node, exp.Table) and node.name.lower() == wanted:
            return source.position_of(node)
        if subject.kind == "name" and isinstance(node, exp.Column) and node.table.lower() == wanted:
            return source.position_of(node)
        if subject.kind in ("table", "name") and isinstance(node, exp.Literal) and node.is_string and node.this == subject.name:
            return source.position_of(node)
    return None, None


def _strip_internal(message: str) -> str:
    """Hide aisql's generated function names from messages."""
    return re.sub(r"__aisql_\w+", "AI function", message, flags=re.IGNORECASE)
