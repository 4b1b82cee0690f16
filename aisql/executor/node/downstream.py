"""What the SQL around an AI call does with its answer, tried on every answer the call can give,
before the first prompt.

Binding (plan_executor.Executor.check) catches wrong types and columns; it cannot catch a cast
or a JSON path that fails on the value itself — `CAST(AI.CLASSIFY(x, ['red', 'blue']) AS INT)`,
`json_extract(AI.IF(...), '$.a')` — which DuckDB raises only when the answers arrive, after the
model time is paid. A call whose answers come from a closed set (AI.IF and AI.GENERATE_BOOL:
true/false; AI.CLASSIFY: its labels; AI.SCORE: its scale's ends) is replaced by each of them in
the largest expression around it that reads nothing else (no column, subquery, aggregate or other
AI call), and that expression is evaluated on its own: where it fails for every answer the call
can give, the query cannot succeed and is refused, with the call's position and DuckDB's reason.
"""

from __future__ import annotations

from typing import Any, Sequence

import duckdb
from sqlglot import exp

from aisql.errors import BindError
from aisql.sql.calls import AICall

# What stops the climb from the call: anything that reads a row, a group or another query.
_READS_MORE = (exp.Column, exp.Query, exp.AggFunc, exp.Window, exp.Subquery, exp.Star, exp.Placeholder, exp.Parameter)
# Where an expression ends and the statement's clauses begin.
_CLAUSES = (exp.Alias, exp.Where, exp.Having, exp.Qualify, exp.Ordered, exp.Group, exp.Join, exp.Select, exp.From, exp.Lambda, exp.PropertyEQ, exp.Kwarg, exp.Slice)


def check_downstream(con: duckdb.DuckDBPyConnection, ast: exp.Expression, calls: Sequence[AICall]) -> None:
    """Raise BindError where the SQL around a call fails for every answer it can give."""
    names = {call.function_name.lower() for call in calls}
    for call in calls:
        values = call.function.possible_values(call.options)
        if not values:
            continue
        for node in ast.find_all(exp.Anonymous):
            if node.name.lower() != call.function_name.lower():
                continue
            around = _around(node, names)
            if around is node:
                continue
            failures = [_fails(con, around, node, value, call.function.result_type(call.options)[0]) for value in values]
            if all(failures):
                shown = ", ".join(repr(v) for v in values[:4]) + (", ..." if len(values) > 4 else "")
                raise BindError(
                    f"{call.spelling}'s answers cannot pass through {_written(around, node, call)}: {failures[0]} "
                    f"(for every answer it can give: {shown}); nothing was asked",
                    line=call.line,
                    col=call.col,
                    hint=_hint(failures[0]),
                )


def _hint(failure: str) -> str:
    if "JSON" in failure:
        return (
            "the call returns the plain value (a label, a boolean, a number), not a JSON object: use it as it is "
            "(Snowflake's AI_CLASSIFY(...):labels[0]::string is read as Snowflake reads it under --dialect snowflake)"
        )
    return "the call returns a plain value (a label, a boolean, a number): cast or compare it as one"


def _around(call_node: exp.Expression, call_names: set[str]) -> exp.Expression:
    """The largest expression above the call that reads nothing but the call."""
    top = call_node
    while True:
        parent = top.parent
        if parent is None or isinstance(parent, _CLAUSES) or not isinstance(parent, exp.Expression):
            return top
        others = [child for child in parent.args.values() if isinstance(child, exp.Expression) and child is not top]
        others += [item for value in parent.args.values() if isinstance(value, list) for item in value if isinstance(item, exp.Expression) and item is not top]
        if any(_reads_more(other, call_names) for other in others):
            return top
        top = parent


def _reads_more(node: exp.Expression, call_names: set[str]) -> bool:
    return any(isinstance(n, _READS_MORE) or (isinstance(n, exp.Anonymous) and n.name.lower() in call_names) for n in node.walk())


def _fails(con: duckdb.DuckDBPyConnection, around: exp.Expression, call_node: exp.Expression, value: Any, sql_type: str) -> str | None:
    """DuckDB's first line where `around` fails with the call answering `value`, else None."""
    trial = around.copy()
    target = next(n for n in trial.find_all(exp.Anonymous) if n.name.lower() == call_node.name.lower())
    literal = exp.cast(exp.convert(value), sql_type)
    if target is trial:
        return None
    target.replace(literal)
    try:
        con.execute(f"SELECT {trial.sql(dialect='duckdb')}").fetchall()
    except duckdb.InterruptException:
        raise KeyboardInterrupt from None
    except (duckdb.ConversionException, duckdb.InvalidInputException, duckdb.OutOfRangeException) as err:
        return str(err).splitlines()[0]  # the value itself fails: what an answer would meet
    except duckdb.Error:
        return None  # the piece cannot stand alone (a named struct field, a lambda's body): not a verdict
    return None


def _written(around: exp.Expression, call_node: exp.Expression, call: AICall) -> str:
    """The expression as the user would read it: the call shown by its spelling."""
    shown = around.copy()
    target = next(n for n in shown.find_all(exp.Anonymous) if n.name.lower() == call_node.name.lower())
    target.replace(exp.var(f"{call.spelling}(...)"))
    return shown.sql(dialect="duckdb")
