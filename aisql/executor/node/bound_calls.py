"""Adapters between DuckDB's scalar function calls and NodeRuntime.

Planned mode registers vectorised Arrow functions: DuckDB hands over a vector of argument tuples
(NULL rows never arrive: DuckDB answers NULL for them itself) and gets the answers back. Naive
mode registers row-at-a-time native functions. Exceptions raised inside are kept so the executor
can re-raise the original error instead of DuckDB's wrapper around it.
"""

from __future__ import annotations

import inspect
from typing import Callable

import duckdb
import pyarrow as pa

from aisql.executor.node.node_runtime import NodeRuntime


class UdfErrors:
    """The first exception raised inside a registered function during a statement."""

    def __init__(self) -> None:
        self.first: BaseException | None = None

    def guard(self, fn: Callable, arity: int) -> Callable:
        def wrapper(*args):
            try:
                return fn(*args)
            except BaseException as err:  # noqa: BLE001 - re-raised by the executor
                if self.first is None:
                    self.first = err
                raise

        return with_arity(wrapper, arity)


def with_arity(fn: Callable, arity: int) -> Callable:
    """`fn` taking *args, declared to take exactly `arity` arguments: DuckDB checks a Python
    function's parameter count against the SQL signature (and reads *args as varargs)."""
    fn.__signature__ = inspect.Signature(
        [inspect.Parameter(f"arg{i}", inspect.Parameter.POSITIONAL_ONLY) for i in range(arity)]
    )
    return fn


def register(con: duckdb.DuckDBPyConnection, runtime: NodeRuntime, naive: bool, errors: UdfErrors) -> None:
    call = runtime.call
    params = [duckdb.sqltype("VARCHAR")] * call.arity
    sql_type, arrow_type = runtime.result_type()
    returns = duckdb.sqltype(sql_type)
    if naive:
        fn = errors.guard(lambda *values: runtime.naive_row(values), call.arity)
        # null_handling special: an answer may be NULL (a typed literal cut short); NULL
        # arguments answer NULL without asking the model (runtime.naive_row).
        # not volatile (DuckDB refuses volatile functions in a window's ORDER BY); still one call per
        # row: DuckDB neither caches nor deduplicates scalar calls
        con.create_function(call.function_name, fn, params, returns, type="native", side_effects=False, null_handling="special")
        return

    def lookup(*arrays):
        columns = [array.to_pylist() for array in arrays]
        return pa.array(runtime.lookup(columns), type=arrow_type)

    # null_handling special: a lookup may answer NULL itself (a node stopped early by a LIMIT
    # answers NULL for prompts it never asked); NULL arguments still answer NULL (runtime.lookup).
    con.create_function(
        call.function_name, errors.guard(lookup, call.arity), params, returns, type="arrow", side_effects=False, null_handling="special"
    )


def register_hashed(con: duckdb.DuckDBPyConnection, runtime: NodeRuntime, errors: UdfErrors) -> None:
    """The node's function again, taking one more argument: DuckDB's hash of the tuple
    (aisql.executor.node.tuple_hashes), by which a streamed node's answers are looked up."""
    remove(con, runtime.call.function_name)
    arity = runtime.call.arity
    params = [duckdb.sqltype("VARCHAR")] * arity + [duckdb.sqltype("UBIGINT")]
    sql_type, arrow_type = runtime.result_type()

    def lookup(*arrays):
        return runtime.lookup_hashed(arrays[:arity], arrays[arity].to_numpy(zero_copy_only=False), arrow_type)

    con.create_function(
        runtime.call.function_name,
        errors.guard(lookup, arity + 1),
        params,
        duckdb.sqltype(sql_type),
        type="arrow",
        side_effects=False,
        null_handling="special",
    )


def unregister(con: duckdb.DuckDBPyConnection, runtime: NodeRuntime) -> None:
    remove(con, runtime.call.function_name)


def register_placeholder(con: duckdb.DuckDBPyConnection, call, errors: UdfErrors, sql_type: str) -> None:
    """A function with the call's signature that must never run (for binding checks)."""

    def never(*args):
        raise RuntimeError(f"{call.function_name} was called while only binding the statement")

    params = [duckdb.sqltype("VARCHAR")] * call.arity
    # not volatile: DuckDB refuses volatile functions where the real (vectorised) one is allowed,
    # e.g. in a window's ORDER BY; binding never calls it
    con.create_function(call.function_name, errors.guard(never, call.arity), params, duckdb.sqltype(sql_type), type="native", side_effects=False)


def remove(con: duckdb.DuckDBPyConnection, function_name: str) -> None:
    try:
        con.remove_function(function_name)
    except Exception:  # already gone
        pass
