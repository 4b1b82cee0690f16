"""The final query of a streamed node asks by the DuckDB hash of its argument tuple.

A node streamed in slices (aisql.executor.cluster.streaming) keeps no argument tuples — only a
digest per prompt text and, per tuple, the 64-bit `hash()` DuckDB computed for it as the slices
were read (aisql.executor.store.answer_index). Rendering and digesting each row of the final query
again costs the driver microseconds a row in Python: for a 1M-pair join, more than everything
else it does per prompt but one. Instead the final statement passes DuckDB's hash of the same
VARCHAR arguments as one more argument of the node's function — DuckDB computes it, natively
and vectorised — and the function looks a vector of hashes up at once (NodeRuntime.lookup_hashed).

Lossless: the hash is trusted only when no two tuples of the node share one (checked when the
node ends: AnswerIndex.seal_tuples); a row whose hash is unknown (a tuple the prefetch did not
see) is rendered and asked as before.
"""

from __future__ import annotations

from typing import Iterable

from sqlglot import exp


def with_tuple_hashes(ast: exp.Expression, function_names: Iterable[str]) -> str:
    """The statement (DuckDB SQL) with `hash(<the call's arguments>)` appended to every call of
    `function_names`: the arguments are the bound call's `CAST(... AS VARCHAR)` expressions,
    the very values the node's input hashed."""
    names = {name.upper() for name in function_names}
    ast = ast.copy()
    calls = [c for c in ast.find_all(exp.Anonymous) if c.name.upper() in names]  # listed first: appending adds calls
    for call in calls:
        call.append("expressions", exp.Anonymous(this="hash", expressions=[a.copy() for a in call.expressions]))
    return ast.sql(dialect="duckdb", comments=False)
