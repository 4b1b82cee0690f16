"""What the front end hands to the planner: one `AICall` per AI function call in the query.

An AICall is model-free: it says which task (IF / CLASSIFY / GENERATE), the prompt template and the
SQL expressions that fill it, the labels and options. The call itself is replaced in the AST by a
*bound call* `__aisql_..(CAST(arg0 AS VARCHAR), ...)` whose arguments are the template's values, so
the rest of the query stays plain DuckDB SQL.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from aisql.sql.template import Template


class AIKind(enum.Enum):
    IF = "IF"
    CLASSIFY = "CLASSIFY"
    GENERATE = "GENERATE"

    @property
    def sql_type(self) -> str:
        return "BOOLEAN" if self is AIKind.IF else "VARCHAR"


@dataclass(frozen=True, eq=False)
class AICall:
    id: str  # stable within a query: "ai_1", "ai_2", ... in order of appearance
    function_name: str  # the bound call's SQL function name, unique per run
    kind: AIKind
    spelling: str  # as written by the user, e.g. "AI.IF" or "AI_FILTER"
    template: Template
    args: tuple[exp.Expression, ...]  # fill template.placeholders, in order (already bound)
    labels: tuple[str, ...] = ()
    max_tokens: int | None = None
    hints: dict[str, Any] = field(default_factory=dict)
    line: int | None = None
    col: int | None = None
    # where each argument was written (a placeholder inside the template, or the argument itself)
    arg_positions: tuple[tuple[int | None, int | None], ...] = ()

    @property
    def arity(self) -> int:
        return len(self.args)

    def describe(self) -> str:
        """One line for plans and messages, e.g. `AI.IF(PROMPT('{c.profile} might buy ...'))`."""
        text = self.template.text
        if len(text) > 60:
            text = text[:57] + "..."
        extra = f", {list(self.labels)}" if self.labels else ""
        if self.max_tokens is not None and self.kind is AIKind.GENERATE:
            extra += f", max_tokens => {self.max_tokens}"
        return f"{self.spelling}(PROMPT({text!r}){extra})"
