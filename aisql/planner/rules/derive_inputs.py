"""Rules: give every node its input relation, with plain filters pushed below it.

`derive_estimates` (early, order-independent): the input with no AI answer known — what
statistics and `explain` count without running a model. `derive_inputs` (last): the input given
the final order, filtered by the answers of the nodes ordered before it (their bound calls are
then lookups). A node whose input cannot be derived streams instead.
"""

from __future__ import annotations

import dataclasses

from aisql.planner.inputs import build_input_sql, build_node_input
from aisql.planner.context import PlanningContext
from aisql.planner.plan import Plan, Strategy
from aisql.planner.scope import find_bound_call


def derive_estimates(plan: Plan, context: PlanningContext) -> Plan:
    all_names = {n.function_name.upper() for n in plan.nodes}
    nodes = []
    for node in plan.nodes:
        estimate_sql, dropped = build_input_sql(node, set(), all_names)
        nodes.append(dataclasses.replace(node, estimate_sql=estimate_sql, estimate_is_upper_bound=dropped))
    return dataclasses.replace(plan, nodes=tuple(nodes))


def derive_inputs(plan: Plan, context: PlanningContext) -> Plan:
    all_names = {n.function_name.upper() for n in plan.nodes}
    available: set[str] = set()
    nodes = []
    for node in plan.nodes:
        input_sql, _, limited = build_node_input(node, available, all_names)
        estimate_sql = node.estimate_sql
        # The estimate over-counts only if it dropped an AI filter that the run applies.
        upper_bound = node.estimate_is_upper_bound and (input_sql is None or estimate_sql != input_sql)
        depends = tuple(
            other.id
            for other in plan.nodes
            if other.function_name.upper() in available
            and node.location.select is not None
            and find_bound_call(node.location.select, other.function_name) is not None
        )
        if node.strategy is Strategy.PREFETCH and input_sql is None:
            node = dataclasses.replace(node, strategy=Strategy.STREAMING, note="input rows not derivable")
        nodes.append(
            dataclasses.replace(
                node,
                input_sql=input_sql if node.strategy is Strategy.PREFETCH else None,
                input_limited=limited and node.strategy is Strategy.PREFETCH,
                estimate_is_upper_bound=upper_bound,
                depends_on=depends,
            )
        )
        available.add(node.function_name.upper())
    return dataclasses.replace(plan, nodes=tuple(nodes))
