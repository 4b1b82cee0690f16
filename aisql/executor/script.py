"""A script read before anything runs: every statement parsed and bound (front-end errors come
first), parameters bound as values, the models named in SQL checked against the run's, and the
notes of vendor arguments accepted and ignored. Shared by runs and explain."""

from __future__ import annotations

import dataclasses
import itertools

from sqlglot import exp

from aisql.errors import AisqlError
from aisql.functions.arguments import WRITTEN_BEFORE
from aisql.executor.session import ModelSession
from aisql.sql.bind import BoundStatement, bind_statement
from aisql.sql.parameters import Parameters, bind_parameters, check_all_used
from aisql.sql.parse import parse_script
from aisql.sql.source import SourceText

_RUNS = itertools.count(1)  # bound call names are unique per process: __aisql_<run>_ai_<n>


def bind_script(source: SourceText, dialect: str | None = None, params: Parameters = None, resources=None) -> list[BoundStatement]:
    """Parse and bind every statement before anything runs, so front-end errors come first.
    Parameter values ($1, ?, $name) go into the syntax trees as values first. `resources`: the
    FlockMTL prompts a connection keeps across calls."""
    statements = []
    calls_so_far = 0
    state: dict = {}
    parsed = parse_script(source, dialect, resources)
    if params is not None or any(isinstance(n, exp.Placeholder) for s in parsed for n in s.ast.walk()):
        parsed = [
            dataclasses.replace(s, ast=bind_parameters(s.ast.copy(), params, state), parameters_bound=True) for s in parsed
        ]
        check_all_used(params, state)
    written: dict[str, int] = {}
    for number, statement in enumerate(parsed, 1):
        token = WRITTEN_BEFORE.set(dict(written))
        try:
            bound = bind_statement(statement, source, function_prefix=f"__aisql_{next(_RUNS)}_", first_call_number=calls_so_far + 1)
        finally:
            WRITTEN_BEFORE.reset(token)
        calls_so_far += len(bound.calls)
        statements.append(bound)
        for name in written_tables(statement.ast):
            written.setdefault(name, number)
    return statements


_WRITES = (exp.Create, exp.Insert, exp.Update, exp.Delete, exp.Drop, exp.Alter, exp.Copy, exp.Merge, exp.TruncateTable)


def written_tables(ast: exp.Expression) -> list[str]:
    """The tables (and views) a statement creates, changes or drops, lower-cased."""
    if not isinstance(ast, _WRITES):
        return []
    targets = ast.expressions if isinstance(ast, exp.TruncateTable) else [ast.this]
    names = []
    for target in targets:
        table = target if isinstance(target, exp.Table) else (target.find(exp.Table) if isinstance(target, exp.Expression) else None)
        if table is not None and table.name:
            names.append(table.name.lower())
    return names


def has_ai(sql_text: str, dialect: str | None) -> bool:
    try:
        return any(bound.has_ai for bound in bind_script(SourceText(sql_text), dialect))
    except AisqlError:
        return False  # DuckDB reports what is wrong with it


def call_notes(statements: list[BoundStatement]) -> list[str]:
    """The AI calls' notes (vendor arguments accepted and ignored), each once, in order."""
    notes = [note for bound in statements for note in bound.statement.notes]
    return list(dict.fromkeys(notes + [note for bound in statements for call in bound.calls for note in call.notes]))


def constants_of(con):
    """A constant expression's value (an argument that is the same for every row, e.g. labels from
    a subquery), computed by the user's DuckDB connection `con`."""

    def evaluate(sql: str):
        rows = con.execute("SELECT " + sql).fetchall()  # fetched whole: the connection is free again
        return rows[0][0]

    return evaluate


@dataclasses.dataclass(frozen=True)
class ModelRoutes:
    """Which model answers each AI call that names one: the calls' function names -> model spec
    (only calls a --model-map sends to a model other than the run's), and the notes to say."""

    by_call: dict[str, str]
    notes: list[str]


def read_model_map(entries, spelled: str = "model_map") -> dict[str, str]:
    """Model-map entries as {name (lowercase): model spec}: a dict {name: model}, or `NAME=MODEL`
    texts (the command line's --model-map, or one such text from Python — never read as its
    characters). `spelled`: how the caller wrote the option (`--model-map` on the command
    line, `model_map` in Python), for errors in the caller's own words."""
    if entries is None or (isinstance(entries, (dict, list, tuple, str)) and not entries):
        return {}
    if isinstance(entries, str):
        entries = [entries]
    example = "--model-map gpt-4o=qwen2.5-coder-0.5b" if spelled.startswith("--") else "model_map={'gpt-4o': 'qwen2.5-coder-0.5b'}"
    if isinstance(entries, dict):
        pairs = list(entries.items())
    elif isinstance(entries, (list, tuple)):
        pairs = [_map_entry(entry, spelled, example) for entry in entries]
    else:
        raise AisqlError(f"{spelled}: expected a dict {{name: model}} or NAME=MODEL texts, got {type(entries).__name__}", hint=f"e.g. {example}")
    mapped: dict[str, str] = {}
    for name, model in pairs:
        if not isinstance(name, str) or not isinstance(model, str) or not name.strip() or not model.strip():
            raise AisqlError(f"{spelled}: {name!r} -> {model!r} is not a model name and a model", hint=f"e.g. {example}")
        mapped[name.strip().lower()] = model.strip()
    return mapped


def _map_entry(entry, spelled: str, example: str) -> tuple[str, str]:
    if not isinstance(entry, str):
        raise AisqlError(f"{spelled}: {entry!r} is not NAME=MODEL text", hint=f"e.g. {example}")
    name, equals, model = entry.partition("=")
    if not equals or not name.strip() or not model.strip():
        raise AisqlError(f"{spelled} {entry!r}: write NAME=MODEL", hint=f"e.g. {example}")
    return name, model


def check_endpoints(statements: list[BoundStatement], session: ModelSession, strict: bool = False, model_map=None) -> ModelRoutes:
    """A model named in SQL (BigQuery's `endpoint =>`, Snowflake's AI_COMPLETE model, FlockMTL's
    model_name) other than the run's: a vendor's query ports as written and is answered by the
    run's model — said in one note per name, never silently — or by the model `model_map` names
    for it (--model-map NAME=MODEL: that call runs on that model, in its own engine and under its
    own result-cache key). `strict` (--strict-models) refuses an unmapped name, with its position."""
    mapped = read_model_map(model_map)
    named = [call for bound in statements for call in bound.calls if call.endpoint]
    if not named:
        return ModelRoutes({}, [])
    model = session.resolved_model
    accepted = {model.name.lower(), model.name.rstrip("/").rsplit("/", 1)[-1].lower()}
    if session.model_spec:
        accepted.add(session.model_spec.lower())
    notes: list[str] = []
    routes: dict[str, str] = {}
    for call in named:
        name = call.endpoint.lower()
        if name in mapped:
            target = mapped[name]
            if target.lower() not in accepted:
                routes[call.function_name] = target
                notes.append(f"{call.spelling}: the model {call.endpoint!r} named in the query is answered by {target} (--model-map)")
            continue
        if name in accepted:
            continue
        if not strict:
            notes.append(f"{call.spelling}: the model {call.endpoint!r} named in the query is answered by this run's model ({model.name}); --model-map {call.endpoint}=MODEL chooses another, --strict-models refuses")
            continue
        raise AisqlError(
            f"{call.spelling}: the model {call.endpoint!r} named in the query is not this run's model ({model.name})",
            line=call.line,
            col=call.col,
            hint=f"run with --model {call.endpoint} or --model-map {call.endpoint}=MODEL, or leave the model out of the call",
        )
    return ModelRoutes(routes, list(dict.fromkeys(notes)))
