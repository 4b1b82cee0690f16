"""Planner rules, applied in order by `aisql.planner.optimizer.plan_statement`."""

from aisql.planner.rules.choose_strategy import choose_strategy
from aisql.planner.rules.derive_inputs import derive_inputs
from aisql.planner.rules.order_filters import order_filters
from aisql.planner.rules.order_nodes import order_nodes

RULES = (order_nodes, order_filters, choose_strategy, derive_inputs)

__all__ = ["RULES", "choose_strategy", "derive_inputs", "order_filters", "order_nodes"]
