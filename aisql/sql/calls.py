"""What the front end hands to the planner: one `AICall` per AI function call in the query.

An AICall is model-free: which function (its definition in `aisql.functions`), the prompt
template and the SQL expressions that fill it, the function's options and the planner's hints.
The call itself is replaced in the AST by a *bound call* `__aisql_..(CAST(arg0 AS VARCHAR), ...)`
whose arguments are the template's values, so the rest of the query stays plain DuckDB SQL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from aisql.functions import AIFunction, Options, Task
from aisql.sql.template import Template


@dataclass(frozen=True, eq=False)
class AICall:
    id: str  # stable within a query: "ai_1", "ai_2", ... in order of appearance
    function_name: str  # the bound call's SQL function name, unique per run
    function: AIFunction
    spelling: str  # as written by the user, e.g. "AI.IF" or "AI_FILTER"
    template: Template
    args: tuple[exp.Expression, ...]  # fill template.placeholders, in order (already bound)
    options: Options = field(default_factory=Options)  # the function's own (labels, max_tokens, ...)
    hints: dict[str, Any] = field(default_factory=dict)  # for the planner: selectivity, anchor
    line: int | None = None
    col: int | None = None
    # where each argument was written (a placeholder inside the template, or the argument itself)
    arg_positions: tuple[tuple[int | None, int | None], ...] = ()
    endpoint: str | None = None  # a model named in SQL (BigQuery's endpoint): must be the run's model
    notes: tuple[str, ...] = ()  # vendor arguments accepted but ignored, one line each

    @property
    def arity(self) -> int:
        return len(self.args)

    @property
    def argument_tables(self) -> list[set[str]]:
        """Per prompt argument, the table aliases its columns are qualified with (lower case)."""
        return [{c.table.lower() for c in arg.find_all(exp.Column) if c.table} for arg in self.args]

    @property
    def task(self) -> Task:
        """What the model is asked for each prompt of this call."""
        return self.function.task(self.options)

    def describe(self) -> str:
        """One line for plans and messages, e.g. `AI.IF(PROMPT('{c.profile} might buy ...'))`."""
        if self.function.contents:
            shown = ", ".join(arg.sql(dialect="duckdb") for arg in self.args)
            return f"{self.spelling}({shown})"
        if self.function.is_aggregate:  # the value as written, not the group list the binder built
            collected = self.args[0].find(exp.ArrayAgg) if self.args else None
            value = collected.this.this if collected is not None and isinstance(collected.this, exp.Cast) else self.args[0]
            return f"{self.spelling}({value.sql(dialect='duckdb')}{self.function.describe_options(self.options)})"
        text = self.template.text
        if len(text) > 60:
            text = text[:57] + "..."
        return f"{self.spelling}(PROMPT({text!r}){self.function.describe_options(self.options)}{self._describe_decision()})"

    def _describe_decision(self) -> str:
        """Labelled examples or a calibration, as they follow the options in plans."""
        if "examples" in self.hints:
            return ", examples => (...)"
        calibration = self.hints.get("calibration")
        return f", {{'calibration': {calibration!r}}}" if calibration else ""
