"""A run's options, declared once: each one's name and the values it accepts.

Every door hands a user's values to `RunRequest` (CLI, Python API, shell) or to `RunOptions`
(DuckDB functions, dbt, serve's runs); both check them here. So a bad value is refused the same
way from every door, before any prompt runs: one line naming the option and the value given
(`checkpoint_every must be a whole number, 1 or more, got 'zero'`), never a TypeError from deep
inside a run, and never a silent 0 or -5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from aisql.errors import AisqlError

OVERFLOW_MODES = ("error", "truncate")  # what a prompt longer than the model's context does


@dataclass(frozen=True)
class OptionRule:
    name: str
    kind: str  # "count": a whole number | "amount": a finite number | "choice": one of `choices`
    minimum: float | None = None
    above_minimum: bool = False  # the minimum itself is refused (seconds: more than 0)
    optional: bool = False  # None allowed: no limit
    choices: tuple[str, ...] = ()

    def wanted(self) -> str:
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices)
        what = "a whole number" if self.kind == "count" else "a finite number"
        if self.minimum is None:
            return what
        bound = f"more than {self.minimum:g}" if self.above_minimum else f"{self.minimum:g} or more"
        return f"{what}, {bound}"

    def accepts(self, value: Any) -> bool:
        if value is None:
            return self.optional
        if self.kind == "choice":
            return isinstance(value, str) and value in self.choices
        if isinstance(value, bool):  # True is an int in Python, never a count
            return False
        if self.kind == "count" and not isinstance(value, int):
            return False
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            return False
        if self.minimum is None:
            return True
        return value > self.minimum if self.above_minimum else value >= self.minimum

    def check(self, value: Any) -> None:
        if not self.accepts(value):
            raise AisqlError(f"{self.name} must be {self.wanted()}, got {value!r}")


RUN_OPTIONS = {
    rule.name: rule
    for rule in (
        OptionRule("checkpoint_every", "count", minimum=1),
        OptionRule("checkpoint_seconds", "amount", minimum=0, above_minimum=True),
        OptionRule("max_prompts", "count", minimum=0, optional=True),
        OptionRule("max_cost", "amount", minimum=0, optional=True),
        OptionRule("price_per_hour", "amount", minimum=0, optional=True),
        OptionRule("on_overflow", "choice", choices=OVERFLOW_MODES),
    )
}


def check_run_options(**values: Any) -> None:
    """Refuse the first value its option does not accept (options not declared here are the
    caller's to check)."""
    for name, value in values.items():
        rule = RUN_OPTIONS.get(name)
        if rule is not None:
            rule.check(value)
