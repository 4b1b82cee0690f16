"""Rule: a LIMIT k over an AI predicate, with nothing ordering the rows, stops paying once k rows
qualify.

SQL leaves `SELECT ... WHERE AI.IF(...) LIMIT k` (no ORDER BY) free to return any k qualifying
rows. The node then evaluates its input in growing chunks (2k, then doubling, at least 16
prompts) and stops as soon as the query has k rows among the answers known; rows whose prompts
were never asked count as not qualifying. The contract, an exception to "exactly what naive
returns" (docs/architecture.md): every row returned is one naive execution also qualifies, and
there are exactly k of them when naive finds at least k. With a selectivity s the node asks about
k/s prompts (up to twice that, from the doubling) instead of all of them.

Only where the answer cannot depend on rows left unasked: one AI call in the statement, a
predicate of the outermost SELECT (its WHERE or an inner join's ON), and that SELECT without
ORDER BY, GROUP BY, aggregates, windows or DISTINCT, and a literal LIMIT (OFFSET added to it).
Everywhere else LIMIT changes nothing here (choose_strategy may stream instead).
"""

from __future__ import annotations

import dataclasses

from sqlglot import exp

from aisql.functions.arguments import literal_value
from aisql.planner.context import PlanningContext
from aisql.planner.plan import AINode, Clause, Plan, Strategy


def stop_at_limit(plan: Plan, context: PlanningContext) -> Plan:
    if len(plan.nodes) != 1:
        return plan
    node = plan.nodes[0]
    rows = _rows_wanted(node)
    if rows is None:
        return plan
    stopping = dataclasses.replace(
        node, strategy=Strategy.PREFETCH, stop_after=rows, note=f"stops once LIMIT {rows} rows qualify (any {rows}: no ORDER BY)"
    )
    return dataclasses.replace(plan, nodes=(stopping,))


def _rows_wanted(node: AINode) -> int | None:
    """LIMIT (+ OFFSET) of the outermost SELECT, if `node` is an early-stoppable predicate there."""
    if not node.call.function.is_predicate:
        return None
    select = node.location.select
    if select is None or select.parent is not None or node.location.clause not in (Clause.WHERE, Clause.JOIN):
        return None
    if node.location.clause is Clause.JOIN:
        joins = select.args.get("joins") or []
        index = node.location.join_index
        if index is None or index >= len(joins) or joins[index].side or (joins[index].kind or "").upper() not in ("", "INNER"):
            return None
    if any(select.args.get(key) is not None for key in ("order", "group", "having", "qualify", "distinct")):
        return None
    if any(e.find(exp.AggFunc) is not None or e.find(exp.Window) is not None for e in select.expressions):
        return None
    limit = select.args.get("limit")
    if not isinstance(limit, exp.Limit):
        return None
    count = literal_value(limit.expression)
    offset_node = select.args.get("offset")
    offset = literal_value(offset_node.expression) if isinstance(offset_node, exp.Offset) else 0
    if not isinstance(count, int) or not isinstance(offset, int) or count < 0 or offset < 0:
        return None
    return count + offset
