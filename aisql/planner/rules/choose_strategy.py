"""Rule: prefetch an AI node's inputs up front, or stream them through the final query?

Prefetch is the default: the distinct inputs are computed once and run as planned batches
(dedup across the whole input, prefix order, full batches). Streaming — evaluating inside the
final query one deduplicated batch per vector — wins where DuckDB reads only part of the input:
a LIMIT without ORDER BY over an AI filter or column. It is also the fallback where a call's rows cannot be
derived (outside a SELECT). An AI column under a LIMIT is prefetched for the rows the LIMIT keeps
(aisql.planner.inputs): streaming it evaluated every row DuckDB projected before its top-N, which
with ORDER BY was the whole input.
"""

from __future__ import annotations

import dataclasses

from sqlglot import exp

from aisql.planner.context import PlanningContext
from aisql.planner.plan import AINode, Clause, Plan, Strategy
from aisql.sql.scopes import QueryScopes


def choose_strategy(plan: Plan, context: PlanningContext) -> Plan:
    return dataclasses.replace(plan, nodes=tuple(_choose(node) for node in plan.nodes))


def _choose(node: AINode) -> AINode:
    loc = node.location
    if loc.select is None:
        return dataclasses.replace(node, strategy=Strategy.STREAMING, note="not inside a SELECT")
    if loc.clause is Clause.OTHER:
        return dataclasses.replace(node, strategy=Strategy.STREAMING, note="in a clause whose rows are not derived")
    if _in_recursion(node):
        return dataclasses.replace(
            node, strategy=Strategy.STREAMING, note="in the recursive part of a recursive CTE: evaluated as DuckDB iterates"
        )
    if _correlated(node):
        return dataclasses.replace(
            node, strategy=Strategy.STREAMING, note="reads columns of an enclosing query: evaluated as DuckDB runs it"
        )
    if _limit_bounds_rows(node):
        return dataclasses.replace(
            node, strategy=Strategy.STREAMING, note="LIMIT bounds the rows: evaluated as DuckDB reads them"
        )
    return dataclasses.replace(node, strategy=Strategy.PREFETCH)


def _in_recursion(node: AINode) -> bool:
    """Is the call inside a recursive CTE's body, reading rows of the CTE itself? Its input is
    then produced by the recursion, iteration by iteration: it cannot be listed up front."""
    select = node.location.select
    cte = select.find_ancestor(exp.CTE)
    while cte is not None:
        with_ = cte.parent
        if isinstance(with_, exp.With) and with_.args.get("recursive"):
            name = cte.alias_or_name.lower()
            if any(t.name.lower() == name and not t.args.get("db") for t in cte.this.find_all(exp.Table)):
                return True
        cte = cte.find_ancestor(exp.CTE)
    return False


def _correlated(node: AINode) -> bool:
    """Do the prompt's arguments name a table of an enclosing query (a correlated subquery, a
    lateral)? Its rows then cannot be listed without the enclosing query's."""
    select = node.location.select
    scope = QueryScopes(select.root()).scope_of(select)
    if scope is None:
        return False
    own = {name.lower() for name in scope.selected_sources}
    return any(c.table and c.table.lower() not in own for arg in node.call.args for c in arg.find_all(exp.Column))


def _limit_bounds_rows(node: AINode) -> bool:
    select = node.location.select
    if select.args.get("limit") is None or select.args.get("distinct") is not None:
        return False
    if select.args.get("group") is not None or any(
        e.find(exp.AggFunc) is not None or e.find(exp.Window) is not None for e in select.expressions
    ):
        return False
    return node.location.clause in (Clause.WHERE, Clause.SELECT) and select.args.get("order") is None
