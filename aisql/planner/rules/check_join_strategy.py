"""Rule: a call's `{'join': ...}` option is read where it means something — an AI join.

The strategy itself is chosen when the join's input is known (aisql.executor.joins.join_rewrite: how
many distinct values the smaller side has decides whether it can be listed); this rule only
refuses, before anything is paid for, an option the call cannot use: a strategy on a call that
does not join two tables, or on a function that does not decide yes/no.
"""

from __future__ import annotations

from aisql.errors import BindError
from aisql.planner.context import PlanningContext
from aisql.planner.plan import NodeRole, Plan


def check_join_strategy(plan: Plan, context: PlanningContext) -> Plan:
    for node in plan.nodes:
        strategy = node.call.hints.get("join")
        if strategy is None or strategy in ("auto", "exact"):
            continue
        if node.role is not NodeRole.JOIN or not node.call.function.is_predicate:
            raise BindError(
                f"{node.call.spelling}: {{'join': {strategy!r}}} applies to an AI predicate in JOIN ... ON, not to this call",
                line=node.call.line,
                col=node.call.col,
                hint="write the AI call in the join's ON clause, or drop the 'join' option",
            )
    return plan
