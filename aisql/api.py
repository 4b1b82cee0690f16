"""The Python API: a DuckDB connection with an engine and an answer store.

    con = aisql.connect(model="tiny")
    con.register("customers", "examples/data/customers.csv")
    result = con.run("SELECT name FROM customers WHERE AI.IF(PROMPT('{profile} likes hiking'))")
    result.table      # pyarrow.Table
    result.stats      # RunStats: prompts, tokens, time per AI node

The CLI is a thin layer over this module.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Sequence

import duckdb

from aisql.engine.base import Engine
from aisql.engine.model.resolving import ResolvedModel
from aisql.errors import AisqlWarning, ConnectionBusyError, DataError
from aisql.executor.store.answer_store import AnswerStore
from aisql.executor.duckdb_errors import file_error
from aisql.executor.explaining import explain_script
from aisql.executor.options.run_options import EXPLAIN, RunRequest, refuse_unknown
from aisql.executor.query import QueryResult, run_script
from aisql.planner.explain import Explanation
from aisql.executor.session import ModelSession

__all__ = ["Connection", "Explanation", "QueryResult", "connect", "file_scan_sql"]

_READERS = {
    ".csv": "read_csv_auto",
    ".tsv": "read_csv_auto",
    ".txt": "read_csv_auto",
    ".parquet": "read_parquet",
    ".json": "read_json_auto",
    ".jsonl": "read_json_auto",
    ".ndjson": "read_json_auto",
}


class Connection:
    """A DuckDB connection that plans and runs AI SQL through a model session (engine + result cache)."""

    def __init__(
        self,
        database: str | None = None,
        *,
        read_only: bool = False,
        session: ModelSession | None = None,
        warn: Callable[[str], None] | None = None,
        dialect: str | None = None,
        model_map: dict[str, str] | None = None,
        **model_options,
    ) -> None:
        """`model_options` open this connection's model session (aisql.executor.session.ModelSession:
        model, engine, engine_options, cache, store); `session` shares another connection's (or
        `aisql.register`'s) model, KV cache and result cache instead. `dialect`: what scripts are
        written in unless a call says otherwise — duckdb (default), bigquery or snowflake.
        `model_map`: a model named in a query -> the model that answers it ({'gpt-4o': 'qwen2.5-coder-0.5b'});
        other names are answered by this connection's model, with a note."""
        from aisql.executor.script import read_model_map
        from aisql.sql.dialects import dialect_for
        from aisql.sql.flockmtl import FlockResources

        dialect_for(dialect)  # an unknown dialect fails here, not at the first query
        self.dialect = dialect
        self.model_map = read_model_map(model_map)  # a bad entry fails here, not at the first query
        self.flock = FlockResources()  # FlockMTL's named prompts, kept across this connection's calls
        try:
            if read_only and not database:
                raise DataError("read_only needs a database file (an in-memory database is always writable)")
            self.duckdb = duckdb.connect(database or ":memory:", read_only=read_only)
        except duckdb.Error as err:
            raise DataError(f"cannot open database {database}: {str(err).splitlines()[0]}") from None
        self._owns_session = session is None
        self.session = session or ModelSession(warn=warn, **model_options)
        self.last_result: QueryResult | None = None  # of the last .sql() call
        # Say through Python's `warnings` when a run's answers carry little signal
        # (aisql.executor.report.signals); the CLI and the shell print them in their summary instead.
        self.quality_warnings = True
        # One call at a time: a DuckDB connection (and a run's temporary functions and tables on
        # it) is not shared by concurrent calls. A second thread is refused, not queued.
        self._in_use = threading.RLock()

    @contextmanager
    def _exclusive(self):
        """Hold this connection for one call; another thread's call meanwhile gets
        ConnectionBusyError (and nothing else: no half-run state, no DuckDB error)."""
        if not self._in_use.acquire(blocking=False):
            raise ConnectionBusyError(
                "this aisql connection is busy with a call from another thread; it refuses instead of waiting",
                hint="open one connection per thread: aisql.Connection(session=con.session) shares the model, its KV cache and the result cache",
            )
        try:
            yield
        finally:
            self._in_use.release()

    # ---- setup ----------------------------------------------------------------------------
    @property
    def engine(self) -> Engine:
        """The engine, loaded on first use (scripts without AI calls never load a model)."""
        return self.session.engine

    @property
    def store(self) -> AnswerStore:
        return self.session.store

    @property
    def resolved_model(self) -> ResolvedModel:
        """Which model this connection means, decided once (without loading it)."""
        return self.session.resolved_model

    def fingerprint(self) -> str:
        """The model's identity in the result cache: weights, tokenizer, numerics."""
        return self.session.fingerprint()

    def register(self, name: str, data) -> None:
        """Make `data` queryable as `name`: a file path (CSV/Parquet/JSON) or an Arrow/pandas object.
        `name` may be qualified as a warehouse names it (`project.dataset.table`,
        `db.schema.table`, quoted or not: aisql.table_names), so a vendor's query runs unchanged."""
        from aisql.table_names import name_parts

        parts = name_parts(name)
        if len(parts) > 1:
            return self._register_qualified(parts, data)
        name = parts[0]
        with self._exclusive():
            if isinstance(data, (str, os.PathLike)):
                try:
                    self.duckdb.execute(f"CREATE OR REPLACE TEMP VIEW {_quote(name)} AS {file_scan_sql(data)}")
                except duckdb.Error as err:  # DuckDB reads (sniffs) the file here: a bad file fails now
                    raise file_error(err, data) from None
            else:
                self.duckdb.register(name, data)

    def _register_qualified(self, parts: list[str], data) -> None:
        from aisql.table_names import qualified_target

        with self._exclusive():
            target = qualified_target(self.duckdb, parts)
            if isinstance(data, (str, os.PathLike)):
                try:
                    self.duckdb.execute(f"CREATE OR REPLACE VIEW {target} AS {file_scan_sql(data)}")
                except duckdb.Error as err:
                    raise file_error(err, data) from None
            else:
                hidden = "__aisql_table_" + "_".join(p.lower() for p in parts).replace('"', "")
                self.duckdb.register(hidden, data)
                self.duckdb.execute(f"CREATE OR REPLACE VIEW {target} AS SELECT * FROM {_quote(hidden)}")

    def add_file_search_path(self, directories: Sequence[str | os.PathLike]) -> None:
        """Resolve relative file paths in queries against these directories too (DuckDB's file_search_path)."""
        dirs = [str(Path(d).resolve()) for d in directories]
        with self._exclusive():
            current = self.duckdb.execute("SELECT current_setting('file_search_path')").fetchall()[0][0]
            merged = [p for p in (current or "").split(",") if p] + [d for d in dirs if d]
            self.duckdb.execute("SET file_search_path = ?", [",".join(dict.fromkeys(merged))])

    # ---- running --------------------------------------------------------------------------
    def run(self, sql_text: str, **options) -> QueryResult:
        """Run every statement of `sql_text`; the result is the last one that returned rows, with
        its statistics. `options` are the run options (aisql.executor.options.run_options:
        params, dialect, naive, hardware, price_per_hour, max_prompts, max_cost, on_overflow,
        checkpoint_every, checkpoint_seconds, progress, approximate, ...), as `aisql run` takes them."""
        refuse_unknown(options)
        options.setdefault("dialect", self.dialect)
        options.setdefault("model_map", self.model_map)
        options.setdefault("flock", self.flock)
        notebook_bar = None
        if "progress" not in options and in_notebook():
            notebook_bar = options["progress"] = notebook_progress()
        try:
            with self._exclusive():
                result = run_script(self.duckdb, self.session, sql_text, RunRequest(**options))
        finally:
            if notebook_bar is not None:
                notebook_bar.close()
        if self.quality_warnings:
            from aisql.executor.report.signals import warnings_of

            for message in warnings_of(result.stats):
                warnings.warn(message, AisqlWarning, stacklevel=2)
        return result

    def sql(self, query: str, params=None, **run_options) -> duckdb.DuckDBPyRelation | None:
        """Plan and run `query` (AI calls included) and return its rows as a DuckDB relation, like
        `duckdb.sql` (None for statements that return no rows). `params`: values of `?` / `$1`
        (a list) or `$name` (a dict) parameters, bound as values, as DuckDB's API takes them.
        `self.last_result` keeps the run's statistics; `run_options` are `run`'s."""
        with self._exclusive():
            self.last_result = self.run(query, params=params, **run_options)
            table = self.last_result.table
            return None if table is None else self.duckdb.from_arrow(table)

    def register_functions(self, con: duckdb.DuckDBPyConnection | None = None, **options):
        """Put ai_if, ai_classify, ai_generate and prompt on `con` (default: this connection's
        DuckDB), sharing this connection's model, KV cache and result cache (see aisql.duckdb_functions)."""
        from aisql.duckdb_functions import register

        return register(self.duckdb if con is None else con, session=self.session, **options)

    def explain(self, sql_text: str, *, sample: int = 0, workers: int | None = None, **options) -> Explanation:
        """Plans of every statement with cost estimates, plan vs naive. No model weights are loaded
        unless `sample` > 0 asks to measure selectivities on that many prompts per AI predicate.
        `workers` (default: this connection's cluster's): each node's shard plan on that many
        engine workers, simulated (nothing is started). `options`: the run options explain
        reads (aisql.executor.options.run_options: dialect, params, hardware, price_per_hour,
        checkpoint_every, model_map), as a run of the script would take them."""
        refuse_unknown(options, EXPLAIN)
        options.setdefault("dialect", self.dialect)
        options.setdefault("model_map", self.model_map)
        request = RunRequest(flock=self.flock, **options)
        if workers is None and self.session.cluster:
            workers = self.session.cluster.workers
        with self._exclusive():
            return explain_script(self.duckdb, self.session, sql_text, request, sample=sample, workers=workers)

    def close(self) -> None:
        """Close DuckDB, and stop the model's workers when this connection opened the session."""
        with self._exclusive():
            self.duckdb.close()
        if self._owns_session:
            self.session.close()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def connect(
    database: str | None = None, *, model: str | None = None, read_only: bool = False, dialect: str | None = None, **options
) -> Connection:
    """Open an aisql connection (in-memory DuckDB unless `database` names a file; `read_only` as
    DuckDB's; `dialect` the SQL scripts are written in: duckdb, bigquery or snowflake). `options`:
    engine options (device, kv_budget, quantize, ...) and session options (engine, cache, store, warn).
    `cluster`: run the model on Ray workers: a worker count for a local Ray runtime (`cluster=4`),
    or a Ray address (`cluster='ray://head:10001'`, with `workers=N`; default one per GPU)."""
    model_map = options.pop("model_map", None)
    con = Connection(
        database,
        read_only=read_only,
        session=ModelSession.from_options(model, **options),
        warn=options.get("warn"),
        dialect=dialect,
        model_map=model_map,
    )
    con._owns_session = True  # its workers (if any) stop with it
    return con


def in_notebook() -> bool:
    """Is this a Jupyter (IPython kernel) session? Its cell output can show a live progress bar."""
    ipython = sys.modules.get("IPython")
    get = getattr(ipython, "get_ipython", None) if ipython is not None else None
    shell = get() if callable(get) else None
    return shell is not None and getattr(shell, "kernel", None) is not None


def notebook_progress():
    """The progress bars `aisql run` draws, drawn in the notebook's cell (rich renders to Jupyter)."""
    from rich.console import Console

    from aisql.progress_bar import RichProgress

    return RichProgress(Console(force_jupyter=True))


def file_scan_sql(path: str | os.PathLike) -> str:
    """SELECT over a data file, by its suffix, with a clear error if it does not exist."""
    path = Path(path).expanduser()
    if not path.exists():
        raise DataError(f"file not found: {path}")
    reader = _READERS.get(path.suffix.lower())
    if reader is None:
        raise DataError(
            f"cannot tell the format of {path}: expected one of {', '.join(sorted(_READERS))}",
        )
    literal = str(path).replace("'", "''")
    return f"SELECT * FROM {reader}('{literal}')"


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
