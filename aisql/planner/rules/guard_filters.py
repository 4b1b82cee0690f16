"""Rule: in the final query, an AI conjunct runs only on rows that passed the conjuncts before it
(see aisql.planner.conjunct_order). Runs last: it changes only what DuckDB runs."""

from __future__ import annotations

from aisql.planner.conjunct_order import pin_conjunct_order
from aisql.planner.context import PlanningContext
from aisql.planner.plan import Plan
from aisql.planner.rules.order_filters import with_final_ast


def guard_filters(plan: Plan, context: PlanningContext) -> Plan:
    if not plan.nodes:
        return plan
    names = {node.function_name.upper() for node in plan.nodes}
    ast = plan.final_ast.copy()
    if not pin_conjunct_order(ast, names):
        return plan
    return with_final_ast(plan, ast, names)
