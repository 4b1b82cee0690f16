"""Rule: run AI nodes in an order where each sees as few rows as possible.

Inner scopes (CTEs, derived tables, subqueries) before the scopes that read them; within a SELECT,
in the order its clauses see rows (JOIN ON, WHERE, GROUP BY, HAVING, SELECT, QUALIFY, ORDER BY);
calls nested in another call's arguments before that call; calls whose prompt aggregates after
the others (they may group by an AI column); otherwise as written. A node that
runs later can use the answers of the nodes before it to filter its input.
"""

from __future__ import annotations

import dataclasses

from aisql.planner.inputs import needs_grouping
from aisql.planner.context import PlanningContext
from aisql.planner.plan import AINode, Plan


def order_nodes(plan: Plan, context: PlanningContext) -> Plan:
    def key(indexed):
        position, node = indexed
        loc = node.location
        return (loc.scope_rank, loc.clause.rank, loc.join_index or 0, _aggregates(node), -loc.nesting, position)

    ordered = [node for _, node in sorted(enumerate(plan.nodes), key=key)]
    return dataclasses.replace(plan, nodes=tuple(ordered))


def _aggregates(node: AINode) -> bool:
    select = node.location.select
    return select is not None and needs_grouping(list(node.call.args), select)
