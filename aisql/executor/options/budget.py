"""Budget guard: stop before a run spends more prompts or money than the user allowed.

The planner's estimate is checked before anything runs; while running, every chunk is checked
before it starts (its cost predicted from the run's own rate so far), so the limit is never
crossed. Whatever was answered before the stop is already committed to the result cache: a
rerun with a higher limit continues where this one stopped.
"""

from __future__ import annotations

from dataclasses import dataclass

from typing import TYPE_CHECKING

from aisql.errors import AisqlError

if TYPE_CHECKING:
    from aisql.planner.hardware import Hardware
    from aisql.planner.plan import Plan


class BudgetExceeded(AisqlError):
    """A run would cross --max-prompts or --max-cost. Raised by the answering path, it carries the
    counts (aisql.executor.answers.answering.AnswerCounts) of what was answered, and kept, before the stop."""

    counts = None


@dataclass
class Budget:
    max_prompts: int | None = None
    max_usd: float | None = None
    price_per_hour: float = 0.0  # what a second of model time costs, for --max-cost
    prompts: int = 0  # evaluated so far
    seconds: float = 0.0  # model time so far

    def __post_init__(self) -> None:
        from aisql.executor.options.run_options import check_run_options

        check_run_options(max_prompts=self.max_prompts, max_cost=self.max_usd, price_per_hour=self.price_per_hour)

    @property
    def usd(self) -> float:
        return self.seconds * self.price_per_hour / 3600

    def allowed(self, wanted: int) -> int:
        """How many of the next `wanted` prompts may still run."""
        allowed = wanted
        if self.max_prompts is not None:
            allowed = min(allowed, max(0, self.max_prompts - self.prompts))
        if self.max_usd is not None and self.price_per_hour > 0 and self.prompts:
            usd_per_prompt = self.usd / self.prompts
            if usd_per_prompt > 0:
                allowed = min(allowed, max(0, int((self.max_usd - self.usd) / usd_per_prompt)))
        return allowed

    def spend(self, prompts: int, seconds: float) -> None:
        self.prompts += prompts
        self.seconds += seconds

    def check_estimate(self, prompts: float, usd: float, where: str) -> None:
        """Refuse to start work the planner expects to cross a limit (before any of it runs)."""
        over = []
        if self.max_prompts is not None and self.prompts + prompts > self.max_prompts:
            over.append(f"--max-prompts {self.max_prompts}")
        if self.max_usd is not None and self.usd + usd > self.max_usd:
            over.append(f"--max-cost {self.max_usd:g}")
        if over:
            spent = f" after {self.prompts} already run" if self.prompts else ""
            raise BudgetExceeded(
                f"{where} needs about {prompts:,.0f} new prompts ({_usd(usd)} at ${self.price_per_hour:.2f}/h, "
                f"planner estimate){spent}, over {' and '.join(over)}: not started",
                hint="raise the limit, or see the plan's cost with `aisql explain`",
            )

    def stopped(self) -> BudgetExceeded:
        limit = (
            f"--max-prompts {self.max_prompts}" if self.max_prompts is not None and self.prompts >= self.max_prompts
            else f"--max-cost {self.max_usd:g}"
        )
        return BudgetExceeded(
            f"stopped after {self.prompts} new prompts ({_usd(self.usd)} of model time): the next ones would exceed {limit}",
            hint="the answers so far are saved in the result cache: rerun with a higher limit to continue",
        )


def _usd(amount: float) -> str:
    return f"${amount:,.4f}" if amount == 0 or amount >= 1e-4 else f"${amount:.1e}"


def check_plan(plan: "Plan", stats, session, profile: "Hardware", budget: Budget, where: str) -> None:
    """The planner's estimate of new work — its prompts less the share a sample finds in the
    result cache — must fit what is left of the budget."""
    from aisql.executor.store.cached_share import cached_share
    from aisql.planner.cost import estimate_plan

    estimate = estimate_plan(plan, stats, profile)
    prompts = usd = 0.0
    for node in plan.nodes:
        node_estimate = estimate.node(node.id)
        if node_estimate is None or node_estimate.quality != "estimate":
            continue
        found = cached_share(node, stats, session.store, session.fingerprint())
        new_share = 1.0 - (found.share if found else 0.0)
        prompts += node_estimate.plan.prompts * new_share
        usd += node_estimate.plan.usd * new_share
    budget.check_estimate(prompts, usd, where)
