"""AI functions on a user's own DuckDB connection, like an extension.

    con = duckdb.connect()
    aisql.register(con, model="tiny")
    con.sql("SELECT title FROM films WHERE ai_if(prompt('Is {0} a comedy?', title))")

Registers one DuckDB function per AI function of `aisql.functions` (`ai_if(prompt VARCHAR) ->
BOOLEAN`, `ai_classify(prompt VARCHAR, labels VARCHAR[]) -> VARCHAR`, `ai_generate(prompt VARCHAR
[, max_tokens]) -> VARCHAR`, ...) and `prompt(template VARCHAR, args ANY...) -> VARCHAR`
(positional `{0}` placeholders). They are vectorised (Arrow) Python functions in the database's
catalog, so every cursor and thread of the database sees them; DuckDB checks the typed arguments
(optional ones are checked by the function's own rules) and answers NULL for NULL arguments. Each vector DuckDB hands over is deduplicated, looked up in
the result cache, and the rest evaluated in prefix order — but only one vector at a time: there
is no cross-vector planning (filters pushed below AI calls, join dedup, predicate order). For
that, `aisql.connect().sql(query)` plans the whole query.

The answers equal the planned engine's for the same prompt: the same instruction framing per AI
function (its definition in aisql.functions), the same model, the same result cache keys.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import duckdb
import pyarrow as pa

from aisql import functions as registry
from aisql.engine.base import Engine
from aisql.errors import AisqlError, AisqlWarning
from aisql.executor.answers.answer_types import RunOptions
from aisql.executor.store.answer_store import Answer, AnswerStore
from aisql.executor.node.bound_calls import with_arity
from aisql.executor.options.run_options import FUNCTIONS, options_for
from aisql.executor.report.run_stats import NodeStats
from aisql.functions import AIFunction, Task
from aisql.executor.session import ModelSession
from aisql.sql.template import Template, parse_template

FUNCTION_OPTIONS = tuple(option.name for option in options_for(FUNCTIONS))  # the run options register() takes


class UdfError(ValueError):
    """A bad value reached an AI function (DuckDB reports it as 'Invalid Input Error: ...')."""


class DuckDBFunctions:
    """The AI functions registered on one DuckDB connection: their model session and their counts.

    Every call shares the session's engine (its prefix KV cache lives across calls and queries) and
    its result cache; `stats` counts prompts and tokens per function like a planned run's nodes."""

    def __init__(self, session: ModelSession, options: RunOptions) -> None:
        self.session = session
        self.options = options
        self.answering = session.answering(options)
        self.stats: dict[str, NodeStats] = {
            f.duckdb_name: NodeStats(node=f.duckdb_name, function=f.duckdb_name, strategy="vector")
            for f in registry.FUNCTIONS
            if f.duckdb_name is not None
        }
        self._seen: dict[str, set[str]] = {}  # per task store key: texts asked before
        self._signal_counted: dict[str, set[str]] = {}  # per task store key: texts whose signal is in `stats`
        self._templates: dict[str, Template] = {}
        self._caster = duckdb.connect()  # DuckDB's own CAST(... AS VARCHAR), as the planner renders values
        self._caster_lock = threading.Lock()
        self._warned: set[str] = set()  # functions whose little-signal warning was said

    # ---- the functions DuckDB calls (one vector of non-NULL rows each) ---------------------
    def answer(self, function: AIFunction, prompts: pa.Array, *option_columns: pa.Array) -> pa.Array:
        """One vector of `function`'s calls: the options of each row (checked once per distinct
        value, by the same rules as in planned SQL), then the answers."""
        tasks: dict[tuple, Task] = {}
        rows = []
        option_values = [column.to_pylist() for column in option_columns]
        empty = []
        for row, value in enumerate(prompts.to_pylist()):
            # NULL for a NULL argument, without asking (null_handling is special: see _define_functions)
            missing = value is None or any(values[row] is None for values in option_values)
            text = None if missing else function.prompt_from_value(value)
            if text is None:
                empty.append(row)
                continue
            key = tuple(_hashable(values[row]) for values in option_values)
            if key not in tasks:
                try:
                    tasks[key] = function.task(function.options_from_values(*(values[row] for values in option_values)))
                except AisqlError as err:
                    raise UdfError(err.message) from None
            rows.append((tasks[key], text))
        answers = self._answer(function.duckdb_name, rows) if rows else []
        for row in empty:
            answers.insert(row, None)
        return pa.array(answers, type=function.arrow_type)

    def prompt(self, templates: pa.Array, *args: pa.Array) -> pa.Array:
        """Fill positional placeholders; values are cast to VARCHAR exactly as DuckDB casts them."""
        columns = [self._as_text(arg) for arg in args]
        out = []
        for row, text in enumerate(templates.to_pylist()):
            template = self._template(text, len(columns))
            out.append(template.render([columns[p.index][row] for p in template.placeholders]))
        return pa.array(out, type=pa.string())

    # ---- answering -------------------------------------------------------------------------
    def _answer(self, function: str, rows: Sequence[tuple[Task, str]]) -> list[Any]:
        """Answers for one vector: each (task, text) asked once, the cache first, the rest in
        prefix order, committed in checkpoints. DuckDB may call from several threads at once; the
        engine runs one call at a time anyway, so one vector is answered at a time (exact counts)."""
        with self.session.lock:
            answers = self._answer_vector(function, rows)
            self._warn_once(function)
        return answers

    def _warn_once(self, function: str) -> None:
        """A function whose answers carry little signal (aisql.executor.report.signals) says so through
        Python's `warnings` once per registration: no end-of-query event reaches a DuckDB
        function, so the warning comes with the vector that crossed the line."""
        if function in self._warned:
            return
        from aisql.executor.report.signals import warnings_of

        said = warnings_of([self.stats[function]])
        if said:
            self._warned.add(function)
            warnings.warn(said[0], AisqlWarning, stacklevel=2)

    def summary(self) -> str:
        """Per function used: rows, prompts and what the answers say about themselves (the lines
        `aisql run` prints), one per line."""
        from aisql.executor.report.signals import quality_lines

        lines = []
        for name, stats in self.stats.items():
            if not stats.rows_in:
                continue
            lines.append(
                f"{name}: {stats.rows_in:,} rows, {stats.prompts_unique:,} distinct prompts, {stats.prompts_cached:,} from the result cache, "
                f"{stats.prompts_evaluated:,} asked the model"
            )
            lines += [("warning: " if line.warning else "") + line.text for line in quality_lines([stats])]
        return "\n".join(lines) or "no AI function was called"

    def _answer_vector(self, function: str, rows: Sequence[tuple[Task, str]]) -> list[Any]:
        started = time.perf_counter()
        stats = self.stats[function]
        stats.rows_in += len(rows)
        by_task: dict[Task, dict[str, int]] = {}
        for task, text in rows:
            counts = by_task.setdefault(task, {})
            counts[text] = counts.get(text, 0) + 1
        answers: dict[Task, dict[str, Answer]] = {}
        for task, counts in by_task.items():
            key = self.answering.key(task)
            try:
                answers[task], done = self.answering.answer_texts(counts, task, seen=self._seen.setdefault(key, set()), progress=(function, function))
                stats.add(done)
            except AisqlError as err:
                raise UdfError(f"{function}: {err.message}") from None
            self._count_signal(stats, task, key, answers[task], counts)
        stats.wall_s += time.perf_counter() - started
        return [answers[task][text].value for task, text in rows]

    def _count_signal(self, stats: NodeStats, task: Task, key: str, answers: dict[str, Answer], texts) -> None:
        """Each distinct answer's signal once (aisql.executor.report.signals reads it at the end)."""
        counted = self._signal_counted.setdefault(key, set())
        decides = task.function.decides
        for text in texts:
            if text not in counted:
                counted.add(text)
                if decides:
                    stats.count_signal(answers[text])
                    stats.count_values((answers[text].value,))
                else:
                    stats.count_generated((answers[text].value,))

    # ---- prompt() helpers -------------------------------------------------------------------
    def _template(self, text: str, given: int) -> Template:
        template = self._templates.get(text)
        if template is None:
            try:
                template = parse_template(text)
            except AisqlError as err:
                raise UdfError(f"prompt: {err.message} in template {text!r}") from None
            for placeholder in template.placeholders:
                if not placeholder.is_positional:
                    raise UdfError(
                        f"prompt: placeholder {{{placeholder.text}}} in template {text!r} is not positional; "
                        "use {0}, {1}, ... for the arguments after the template"
                    )
                if placeholder.index >= given:
                    raise UdfError(
                        f"prompt: placeholder {{{placeholder.index}}} in template {text!r} has no argument "
                        f"({given} given after the template)"
                    )
            self._templates[text] = template
        return template

    def _as_text(self, values: pa.Array) -> list[str]:
        if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
            return values.to_pylist()
        with self._caster_lock:
            self._caster.register("__values", pa.table({"v": values}))
            cast = self._caster.sql("SELECT CAST(v AS VARCHAR) AS v FROM __values").to_arrow_table()
            self._caster.unregister("__values")
        return cast.column("v").to_pylist()


def register(
    con: duckdb.DuckDBPyConnection,
    model: str | None = None,
    *,
    session: ModelSession | None = None,
    engine: Engine | None = None,
    cache: bool | str | os.PathLike = True,
    store: AnswerStore | None = None,
    **options,
) -> DuckDBFunctions:
    """Register the AI functions (ai_if, ai_classify, ai_generate, ...) and prompt on `con`'s
    database; returns their handle (stats, session). They work from every cursor of the database
    and from any thread. Registering again (from any cursor) makes the new registration answer
    (e.g. with another model); it is harmless.

    `model`, the engine options (device, kv_budget, quantize, ...) and `cache` mean what they mean
    for `aisql.connect`; `session` shares an `aisql.Connection`'s model and caches instead. The
    run options the functions take (on_overflow, checkpoint_every, checkpoint_seconds: those of
    aisql.executor.options.run_options whose doors include "functions") go to every call."""
    settings = {name: options.pop(name) for name in FUNCTION_OPTIONS if name in options}
    run_options = RunOptions.of(**settings)
    if session is None:
        session = ModelSession.from_options(model, engine=engine, cache=cache, store=store, **options)
    handle = DuckDBFunctions(session, run_options)
    with _REGISTERING:
        token = _database_token(con)
        if token is None:
            token = uuid.uuid4().hex[:16]
            _define_functions(con, token)
        _ANSWERING[token] = handle
    return handle


# Python functions live in a DuckDB database's catalog, seen by all its cursors, but can be
# removed only by the connection that created them. So each database gets the functions once,
# with a marker function naming its token, and they answer through the latest registration.
# The catalog entry holds a borrowed pointer to the Python callable, owned by the connection that
# created it: when that connection (a cursor, say) is closed or collected, DuckDB drops its
# reference while the catalog still points at the callable, and the next call from another cursor
# runs a freed object (a segfault). `_CALLABLES` owns them for the life of the process instead
# (a few closures per database).
_ANSWERING: dict[str, DuckDBFunctions] = {}
_CALLABLES: dict[str, list[Callable]] = {}
_REGISTERING = threading.Lock()
_MARKER = "__aisql_functions_"


def _database_token(con: duckdb.DuckDBPyConnection) -> str | None:
    rows = con.execute("SELECT function_name FROM duckdb_functions() WHERE starts_with(function_name, ?) LIMIT 1", [_MARKER]).fetchall()
    return rows[0][0][len(_MARKER) :] if rows else None


def _define_functions(con: duckdb.DuckDBPyConnection, token: str) -> None:
    varchar = duckdb.sqltype("VARCHAR")
    owned = _CALLABLES.setdefault(token, [])
    for function in registry.FUNCTIONS:
        if function.duckdb_name is None:
            continue  # not offered on a user's connection (see the function's module)
        # Parameters up to the first with a default are typed; the rest are optional (varargs),
        # checked by the function's own rules.
        fixed = []
        for parameter in function.duckdb_parameters:
            if parameter.default is not None:
                break
            fixed.append(duckdb.sqltype(parameter.sql_type))
        optional = len(fixed) < len(function.duckdb_parameters)
        fn = _answering(token, function, 1 + len(fixed), optional)
        owned.append(fn)
        first = duckdb.sqltype(function.duckdb_prompt_type)
        # null_handling special: an answer may be NULL for non-NULL arguments (AI_AGG over a list
        # without values); NULL arguments still answer NULL (DuckDBFunctions.answer)
        con.create_function(
            function.duckdb_name, fn, [first] + fixed, duckdb.sqltype(function.sql_type), type="arrow", side_effects=False, null_handling="special"
        )
    # prompt(template, *args ANY): a Python *args function is a DuckDB varargs function.
    owned += [lambda *arrays: _ANSWERING[token].prompt(*arrays), lambda: token]
    con.create_function("prompt", owned[-2], [varchar], varchar, type="arrow", side_effects=False)
    con.create_function(_MARKER + token, owned[-1], [], varchar, side_effects=False)


def _answering(token: str, function: AIFunction, fixed: int, optional: bool) -> Callable:
    most = 1 + len(function.duckdb_parameters)

    def answer(*columns):
        if len(columns) > most:
            names = ", ".join(["prompt"] + [p.name for p in function.duckdb_parameters])
            raise UdfError(f"{function.duckdb_name} takes at most {most} arguments ({names}), got {len(columns)}")
        return _ANSWERING[token].answer(function, *columns)

    return answer if optional else with_arity(answer, fixed)


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value
