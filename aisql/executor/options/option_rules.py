"""The values a run option accepts, as a rule that refuses any other in one line naming the
option and the value (`checkpoint_every must be a whole number, 1 or more, got 'zero'`). The
options themselves, each with its rule, are declared in aisql.executor.options.run_options.
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
    kind: str  # "count": a whole number | "amount": a finite number | "choice": one of `choices` | "flag": True or False
    minimum: float | None = None
    above_minimum: bool = False  # the minimum itself is refused (seconds: more than 0)
    optional: bool = False  # None allowed: no limit
    choices: tuple[str, ...] = ()

    def wanted(self) -> str:
        if self.kind == "flag":
            return "True or False"
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
        if self.kind == "flag":
            return isinstance(value, bool)
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
