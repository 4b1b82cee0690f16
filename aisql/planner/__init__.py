"""Planner: where SQL meets the model. Pure functions from a bound statement to a Plan."""

from aisql.planner.context import PlannerRule, PlanningContext
from aisql.planner.optimizer import plan_statement
from aisql.planner.plan import AINode, Clause, NodeRole, Plan, Strategy

__all__ = ["AINode", "Clause", "NodeRole", "Plan", "PlannerRule", "PlanningContext", "Strategy", "plan_statement"]
