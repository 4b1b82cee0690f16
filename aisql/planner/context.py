"""What planning a statement may consult, in one object handed to every rule.

The rules are pure functions of (plan, context). The context carries what they cannot see in
the plan itself: statistics about data, prompts and the model (asked, never computed here; see
`aisql.planner.statistics`). Without statistics the cost-based rules keep the written order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from aisql.planner.plan import Plan
    from aisql.planner.statistics import Statistics


@dataclass(frozen=True)
class PlanningContext:
    statistics: Statistics | None = None


class PlannerRule(Protocol):
    """One planner rewrite: a new plan from a plan (rules never mutate their input)."""

    __name__: str

    def __call__(self, plan: Plan, context: PlanningContext) -> Plan: ...
