"""Plan one bound statement: make an AI node per call, then apply the RULES in order."""

from __future__ import annotations

from aisql.planner.context import PlannerRule, PlanningContext
from aisql.planner.plan import AINode, Plan
from aisql.planner.rules import RULES
from aisql.planner.scope import locate, role_of
from aisql.sql.bind import BoundStatement
from aisql.sql.scopes import QueryScopes


def plan_statement(bound: BoundStatement, context: PlanningContext = PlanningContext(), rules: tuple[PlannerRule, ...] = RULES) -> Plan:
    """The plan of one statement: an AI node per call, then the rules in order. The context's
    statistics inform the cost-based rules; without them they keep the written order."""
    all_names = {c.function_name.upper() for c in bound.calls}
    scopes = QueryScopes(bound.ast)
    nodes = []
    for call in bound.calls:
        location = locate(bound.ast, call, all_names, scopes)
        nodes.append(AINode(call=call, role=role_of(location), location=location))
    plan = Plan(
        statement_sql=bound.statement.text,
        final_sql=bound.sql(),
        final_ast=bound.ast,
        nodes=tuple(nodes),
    )
    for rule in rules:
        plan = rule(plan, context)
    return plan
