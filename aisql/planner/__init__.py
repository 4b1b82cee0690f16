"""Planner: where SQL meets the model. Pure functions from a bound statement to a Plan.

Its names load on first use, so a door that reads only the hardware profiles' names (the CLI)
imports no planning code."""

from __future__ import annotations

from aisql.lazy import lazy_exports

_LAZY = (  # name -> the module it loads from
    dict.fromkeys(("PlannerRule", "PlanningContext"), "aisql.planner.context")
    | dict.fromkeys(("plan_statement",), "aisql.planner.optimizer")
    | dict.fromkeys(("AINode", "Clause", "NodeRole", "Plan", "Strategy"), "aisql.planner.plan")
)
__all__ = sorted(_LAZY)

__getattr__ = lazy_exports("aisql.planner", _LAZY, globals())
