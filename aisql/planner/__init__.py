"""Planner: where SQL meets the model. Pure functions from a bound statement to a Plan.

Its names load on first use, so a door that reads only the hardware profiles' names (the CLI)
imports no planning code."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aisql.lazy import lazy_exports

_LAZY = {
    "PlannerRule": "aisql.planner.context",
    "PlanningContext": "aisql.planner.context",
    "plan_statement": "aisql.planner.optimizer",
    "AINode": "aisql.planner.plan",
    "Clause": "aisql.planner.plan",
    "NodeRole": "aisql.planner.plan",
    "Plan": "aisql.planner.plan",
    "Strategy": "aisql.planner.plan",
}

if TYPE_CHECKING:  # pragma: no cover
    from aisql.planner.context import PlannerRule, PlanningContext
    from aisql.planner.optimizer import plan_statement
    from aisql.planner.plan import AINode, Clause, NodeRole, Plan, Strategy

__all__ = ["AINode", "Clause", "NodeRole", "Plan", "PlannerRule", "PlanningContext", "Strategy", "plan_statement"]

__getattr__ = lazy_exports("aisql.planner", _LAZY, globals())
