"""Rule: in the final query, an AI conjunct runs only on rows that passed the conjuncts before it
(see aisql.planner.conjunct_order). Runs last: it changes only what DuckDB runs."""

from __future__ import annotations

import dataclasses

from aisql.planner.conjunct_order import pin_conjunct_order
from aisql.planner.plan import Plan
from aisql.planner.rules.order_filters import relocate


def guard_filters(plan: Plan, stats=None) -> Plan:
    if not plan.nodes:
        return plan
    names = {node.function_name.upper() for node in plan.nodes}
    ast = plan.final_ast.copy()
    if not pin_conjunct_order(ast, names):
        return plan
    nodes = tuple(dataclasses.replace(n, location=relocate(ast, n, names)) for n in plan.nodes)
    return dataclasses.replace(plan, final_ast=ast, final_sql=ast.sql(dialect="duckdb", comments=False), nodes=nodes)
