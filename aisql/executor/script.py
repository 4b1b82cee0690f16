"""A script read before anything runs: every statement parsed and bound (front-end errors come
first), parameters bound as values, the models named in SQL checked against the run's, and the
notes of vendor arguments accepted and ignored. Shared by runs and explain."""

from __future__ import annotations

import dataclasses
import itertools

from sqlglot import exp

from aisql.errors import AisqlError
from aisql.executor.session import ModelSession
from aisql.sql.bind import BoundStatement, bind_statement
from aisql.sql.parameters import Parameters, bind_parameters, check_all_used
from aisql.sql.parse import parse_script
from aisql.sql.source import SourceText

_RUNS = itertools.count(1)  # bound call names are unique per process: __aisql_<run>_ai_<n>


def bind_script(source: SourceText, dialect: str | None = None, params: Parameters = None) -> list[BoundStatement]:
    """Parse and bind every statement before anything runs, so front-end errors come first.
    Parameter values ($1, ?, $name) go into the syntax trees as values first."""
    statements = []
    calls_so_far = 0
    state: dict = {}
    parsed = parse_script(source, dialect)
    if params is not None or any(isinstance(n, exp.Placeholder) for s in parsed for n in s.ast.walk()):
        parsed = [
            dataclasses.replace(s, ast=bind_parameters(s.ast.copy(), params, state), parameters_bound=True) for s in parsed
        ]
        check_all_used(params, state)
    for statement in parsed:
        bound = bind_statement(statement, source, function_prefix=f"__aisql_{next(_RUNS)}_", first_call_number=calls_so_far + 1)
        calls_so_far += len(bound.calls)
        statements.append(bound)
    return statements


def has_ai(sql_text: str, dialect: str | None) -> bool:
    try:
        return any(bound.has_ai for bound in bind_script(SourceText(sql_text), dialect))
    except AisqlError:
        return False  # DuckDB reports what is wrong with it


def call_notes(statements: list[BoundStatement]) -> list[str]:
    """The AI calls' notes (vendor arguments accepted and ignored), each once, in order."""
    notes = [note for bound in statements for note in bound.statement.notes]
    return list(dict.fromkeys(notes + [note for bound in statements for call in bound.calls for note in call.notes]))


def check_endpoints(statements: list[BoundStatement], session: ModelSession, strict: bool = False) -> list[str]:
    """A model named in SQL (BigQuery's `endpoint =>`, Snowflake's AI_COMPLETE model) other than
    the run's: aisql runs one model per run, so a vendor's query ports as written and is answered
    by the run's model — said in one note per name, never silently. `strict` (--strict-models)
    refuses it instead, with its position."""
    named = [(bound, call) for bound in statements for call in bound.calls if call.endpoint]
    if not named:
        return []
    model = session.resolved_model
    accepted = {model.name.lower(), model.name.rstrip("/").rsplit("/", 1)[-1].lower()}
    notes: list[str] = []
    for _, call in named:
        if call.endpoint.lower() in accepted:
            continue
        if not strict:
            notes.append(f"{call.spelling}: the model {call.endpoint!r} named in the query is answered by this run's model ({model.name}); --strict-models refuses instead")
            continue
        raise AisqlError(
            f"{call.spelling}: the model {call.endpoint!r} named in the query is not this run's model ({model.name})",
            line=call.line,
            col=call.col,
            hint=f"run with --model {call.endpoint} if aisql can load it, or leave the model out of the call",
        )
    return list(dict.fromkeys(notes))
