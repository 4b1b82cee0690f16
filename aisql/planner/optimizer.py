"""Plan one bound statement: make an AI node per call, then apply the RULES in order."""

from __future__ import annotations

from aisql.planner.plan import AINode, Plan
from aisql.planner.rules import RULES
from aisql.planner.scope import locate, role_of
from aisql.sql.bind import BoundStatement


def plan_statement(bound: BoundStatement, stats=None, rules=RULES) -> Plan:
    """The plan of one statement. `stats` (aisql.planner.statistics.Statistics) informs the
    cost-based rules; without it they keep the written order."""
    all_names = {c.function_name.upper() for c in bound.calls}
    nodes = []
    for call in bound.calls:
        location = locate(bound.ast, call, all_names)
        nodes.append(AINode(call=call, role=role_of(location), location=location))
    plan = Plan(
        statement_sql=bound.statement.text,
        final_sql=bound.sql(),
        final_ast=bound.ast,
        nodes=tuple(nodes),
    )
    for rule in rules:
        plan = rule(plan, stats)
    return plan
