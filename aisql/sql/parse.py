"""Parse SQL text into statements with sqlglot, mapping errors to positions.

The relational part of every query runs in DuckDB, so DuckDB's dialect is the default; a script
written for BigQuery or Snowflake is read in that vendor's dialect (`aisql.sql.dialects`) and
written out in DuckDB's. The AI functions' spellings of every vendor are recognised in
`aisql.sql.recognize`, in any dialect.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from contextlib import contextmanager
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from aisql.errors import AisqlError, SqlSyntaxError
from aisql.sql.dialects import DEFAULT, dialect_for
from aisql.sql.source import SourceText, code_start

DIALECT = DEFAULT  # what runs: DuckDB


@dataclass(frozen=True)
class Statement:
    """One statement of a script: its AST and its exact original text (run verbatim when it has no AI calls)."""

    ast: exp.Expression
    text: str
    start: int  # offset of `text` in the script
    dialect: str = DEFAULT  # what `text` is written in; anything but DuckDB's runs as generated SQL
    parameters_bound: bool = False  # parameter values are in `ast` (not in `text`): run the AST
    notes: tuple[str, ...] = ()  # what reading it accepted and ignored (a FlockMTL model name), said once

    @property
    def runs_verbatim(self) -> bool:
        return self.dialect == DEFAULT and not self.parameters_bound


def parse_script(source: SourceText, dialect: str | None = None, resources=None) -> list[Statement]:
    """All statements of `source` (written in `dialect`, default DuckDB's), in order; raises
    SqlSyntaxError with line/column. `resources`: the FlockMTL prompts a connection keeps across
    calls (aisql.sql.flockmtl.FlockResources); a new set per call without it."""
    if not source.text.strip():
        raise SqlSyntaxError("the query is empty")
    read = dialect_for(dialect)
    try:
        tokens = sqlglot.Dialect.get_or_raise(read).tokenize(source.text)
    except TokenError as err:
        line, col = _unterminated_position(source)
        raise SqlSyntaxError(
            "unterminated string or quoted identifier" if line else f"cannot tokenize SQL: {err}",
            line=line,
            col=col,
            hint="check that every ' and \" is closed",
        ) from None
    from aisql.sql import flockmtl

    # FlockMTL's resource statements (CREATE PROMPT, DELETE PROMPT 'x', CREATE SECRET (TYPE
    # OPENAI, ...)) are not SQL sqlglot or DuckDB read: set aside here, taken in order below.
    taken = [(a, source.text[a:b]) for a, b in _pieces(source.text, tokens) if flockmtl.is_resource(source.text[a:b])]
    parsed_source = source
    if taken:
        text = source.text
        for start, piece in taken:
            text = text[:start] + re.sub(r"[^\n]", " ", piece) + text[start + len(piece) :]
        parsed_source = SourceText(text)
        tokens = sqlglot.Dialect.get_or_raise(read).tokenize(text)
    try:
        with _quiet_sqlglot():  # EXPLAIN, PRAGMA, ...: sqlglot warns as it keeps them as commands
            asts = sqlglot.parse(parsed_source.text, read=read)
    except ParseError as err:
        first = err.errors[0] if err.errors else {}
        description = _clean_description(first.get("description") or str(err))
        highlight = first.get("highlight") or ""
        line, col = first.get("line"), first.get("col")
        if line and col and highlight:
            # sqlglot reports the column where the offending token ends; users expect where it starts.
            col = max(1, col - len(highlight) + 1)
        misread = _ai_call_misread(first)
        if misread is not None:
            message, hint = misread
            raise SqlSyntaxError(message, line=line, col=col, hint=hint) from None
        near = f" near {highlight!r}" if highlight else ""
        raise SqlSyntaxError(f"SQL syntax error{near}: {description}", line=line, col=col) from None
    for ast in asts:
        if ast is not None:
            _plain_text_literals(ast, (dialect or DEFAULT).lower())
    split = _split_statements(parsed_source, tokens, asts, (dialect or DEFAULT).lower())
    statements = _vendor_rewrites(split, source, taken, resources if resources is not None else flockmtl.FlockResources(), (dialect or DEFAULT).lower())
    if not statements:
        raise SqlSyntaxError("the query has no statement, only comments")
    return statements


def _vendor_rewrites(statements: list[Statement], source: SourceText, taken: list[tuple[int, str]], resources, dialect: str) -> list[Statement]:
    """Vendor spellings read as aisql's, in script order: FlockMTL's resource statements taken
    (each answering one row that says what it did) and its llm_* calls made AI functions
    (aisql.sql.flockmtl); multi-label classification (multi_label) and BigQuery's table-valued
    generation (table_functions) rewritten; Snowflake's VARIANT paths on AI_CLASSIFY read on the
    object Snowflake returns (snowflake_variants)."""
    from aisql.sql import flockmtl, multi_label, snowflake_variants, table_functions

    kept: list[Statement] = []
    said = len(resources.notes)  # notes before this script (a connection's earlier statements) are said already
    ordered = sorted([(s.start, s) for s in statements] + list(taken), key=lambda item: item[0])
    for start, item in ordered:
        if isinstance(item, str):
            try:
                what = resources.take_statement(item)
            except AisqlError as err:
                line, col = source.line_col(start + code_start(item))
                raise type(err)(err.message, line=line, col=col, hint=err.hint) from None
            ast = exp.select(exp.Literal.string(what).as_("flockmtl"))
            kept.append(Statement(ast=ast, text=ast.sql(dialect=DIALECT), start=start, notes=tuple(resources.notes[said:])))
            said = len(resources.notes)
            continue
        statement = item
        flockmtl.translate(statement.ast, resources, source.at)
        if dialect == "snowflake":
            snowflake_variants.translate(statement.ast)
        multi_label.translate(statement.ast, source.at)
        resources.notes.extend(table_functions.translate(statement.ast, source.at))
        notes = tuple(resources.notes[said:])
        said = len(resources.notes)
        kept.append(dataclasses.replace(statement, notes=notes) if notes else statement)
    return kept


def _plain_text_literals(ast: exp.Expression, dialect: str) -> None:
    """Dollar-quoted ($$...$$, $tag$...$tag$), raw (r'...') and, in DuckDB, escape (E'...')
    strings are text literals like '...': rewritten as plain string literals of the same value
    (sqlglot has already decoded the escapes as DuckDB does), so every place that wants a string
    literal — a PROMPT template, CLASSIFY's labels, an option — takes them. (A BigQuery b'...' is
    bytes, not text, and stays as it is.)"""
    kinds = (exp.RawString, exp.ByteString) if dialect == DEFAULT else (exp.RawString,)
    for node in list(ast.find_all(*kinds)):
        if not isinstance(node.this, str):
            continue
        literal = exp.Literal.string(node.this)
        literal.meta.update(node.meta)
        node.replace(literal)


@contextmanager
def _quiet_sqlglot():
    logger = logging.getLogger("sqlglot")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def explained_sql(statement: Statement) -> str | None:
    """The statement an `EXPLAIN ...` explains (None for anything else)."""
    ast = statement.ast
    if isinstance(ast, exp.Command) and ast.name.upper() == "EXPLAIN" and isinstance(ast.expression, exp.Literal):
        return ast.expression.this
    return None


WRITING_FUNCTIONS = frozenset({"nextval", "setval"})  # a SELECT calling them advances a sequence: a write


def _writes(node: exp.Expression) -> bool:
    return isinstance(node, exp.Func) and (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower() in WRITING_FUNCTIONS


def only_reads(text: str, dialect: str | None = None) -> bool:
    """Does every statement of `text` only read (queries, DESCRIBE, SHOW)? False if it does not
    parse: the run reports the syntax error."""
    read = dialect_for(dialect)
    try:
        with _quiet_sqlglot():
            asts = sqlglot.parse(text, read=read)
    except (ParseError, TokenError):
        return False
    readers = (exp.Query, exp.Describe, exp.Show)
    return all(
        ast is None
        or (
            isinstance(ast, readers)
            and not ast.args.get("into")
            and not any(isinstance(n, (exp.Into, exp.Insert, exp.Create)) or _writes(n) for n in ast.walk())
        )
        for ast in asts
    )


def _pieces(text: str, tokens) -> list[tuple[int, int]]:
    """(start, end) of each non-blank text between semicolons."""
    from sqlglot.tokens import TokenType

    pieces: list[tuple[int, int]] = []
    begin = 0
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON:
            pieces.append((begin, tok.start))
            begin = tok.end + 1
    pieces.append((begin, len(text)))
    return [(a, b) for a, b in pieces if text[a:b].strip()]


def _split_statements(source: SourceText, tokens, asts, dialect: str) -> list[Statement]:
    """Pair each AST with the text between semicolons, so non-AI statements run byte-for-byte."""
    pieces = _pieces(source.text, tokens)
    statements = [ast for ast in asts if ast is not None]
    if len(pieces) != len(statements):  # comments-only pieces etc.: fall back to generated SQL
        return [Statement(ast=a, text=a.sql(dialect=DIALECT), start=0) for a in statements]
    return [Statement(ast=a, text=source.text[s:e], start=s, dialect=dialect) for a, (s, e) in zip(statements, pieces)]


_MISSING_ARGUMENT = re.compile(r"Required keyword: '\w+' missing for <class '[\w.]+\.(\w+)'>")


def _ai_call_misread(error: dict) -> tuple[str, str] | None:
    """(message, hint) when sqlglot could not build one of its AI function nodes (AI_AGG,
    AI_CLASSIFY, ...): an argument is missing, or AI_AGG(DISTINCT ...) swallowed the task —
    said in the function's terms, not as sqlglot's "Required keyword 'expression' missing"."""
    from aisql.functions import FUNCTIONS

    found = _MISSING_ARGUMENT.match(error.get("description") or "")
    if not found:
        return None
    function = next((f for f in FUNCTIONS if any(node.__name__ == found[1] for node in f.sqlglot_nodes)), None)
    if function is None:
        return None
    before = error.get("start_context") or ""
    spelled = max(((m.start(), m[1]) for name in function.spellings for m in re.finditer(rf"({re.escape(name)})\s*\(", before, re.IGNORECASE)), default=None)
    spelling = spelled[1] if spelled else function.spellings[0]
    if spelled and re.match(r"\s*\(\s*DISTINCT\b", before[spelled[0] + len(spelling) :], re.IGNORECASE):
        return (
            f"{spelling}(DISTINCT ...) is not supported",
            f"give it distinct values from a subquery, e.g. {spelling}(v, '...') FROM (SELECT DISTINCT g, v FROM t) GROUP BY g",
        )
    return f"{spelling}: an argument is missing", f"call it as {function.signature_hint}"


def _clean_description(text: str) -> str:
    text = text.split("\n")[0]
    if "Required keyword" in text and "missing" in text:
        return "incomplete expression"
    if text.startswith("Expecting "):
        return "expected " + text[len("Expecting ") :]
    return text


def _unterminated_position(source: SourceText) -> tuple[int | None, int | None]:
    """Where an unclosed quote starts (outside comments), for the tokenizer's vague errors."""
    text = source.text
    i = 0
    while i < len(text):
        ch = text[i]
        if text.startswith("--", i):
            nl = text.find("\n", i)
            i = len(text) if nl < 0 else nl + 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = len(text) if end < 0 else end + 2
            continue
        if ch in ("'", '"'):
            j = i + 1
            while True:
                k = text.find(ch, j)
                if k < 0:
                    return source.line_col(i)
                if text.startswith(ch * 2, k):
                    j = k + 2
                    continue
                i = k + 1
                break
            continue
        i += 1
    return None, None
