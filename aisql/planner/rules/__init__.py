"""Planner rules, applied in order by `aisql.planner.optimizer.plan_statement`.

Each rule is a `PlannerRule`: a pure function (plan, context) -> plan, one rule per module.
"""

from aisql.planner.context import PlannerRule
from aisql.planner.rules.check_join_strategy import check_join_strategy
from aisql.planner.rules.choose_anchor import choose_anchor
from aisql.planner.rules.choose_strategy import choose_strategy
from aisql.planner.rules.derive_inputs import derive_estimates, derive_inputs
from aisql.planner.rules.guard_filters import guard_filters
from aisql.planner.rules.order_filters import order_filters
from aisql.planner.rules.order_nodes import order_nodes
from aisql.planner.rules.order_predicates import order_predicates
from aisql.planner.rules.stop_at_limit import stop_at_limit

RULES: tuple[PlannerRule, ...] = (
    order_nodes,
    derive_estimates,
    order_predicates,
    choose_anchor,
    check_join_strategy,
    order_filters,
    choose_strategy,
    stop_at_limit,
    derive_inputs,
    guard_filters,
)

__all__ = [
    "RULES",
    "check_join_strategy",
    "choose_anchor",
    "choose_strategy",
    "derive_estimates",
    "derive_inputs",
    "guard_filters",
    "order_filters",
    "order_nodes",
    "order_predicates",
    "stop_at_limit",
]
