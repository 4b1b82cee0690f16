"""What AI_AGG and AI_SUMMARIZE_AGG share: aggregate functions over a group's values.

The binder turns the call's value argument into the group's sorted, non-NULL values as one JSON
list — `to_json(list_sort(array_agg(CAST(v AS VARCHAR)) FILTER (WHERE v IS NOT NULL)))` — and
binds the AI call over that: the rest (GROUP BY, HAVING, a whole table; grouped inputs derived
by the planner, dedup, the result cache) is the ordinary path. A group without values is NULL.
The executor reduces each group by map-reduce (aisql.executor.answers.aggregate). `OVER (...)` is
refused: an AI aggregate is not a window function here; `FILTER (WHERE ...)` narrows the values
collected, as on any SQL aggregate; `DISTINCT` is refused at parse time (a subquery does it).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from aisql.engine.model.prompt_format import Framing
from aisql.errors import BindError
from aisql.functions import arguments
from aisql.functions.base import AIFunction, Options, Request, Task

SYSTEM = "You answer a task over a list of items. Answer the task directly and concisely."
DEFAULT_MAX_TOKENS = 128  # each partial and the final answer
VARCHAR = exp.DataType.build("VARCHAR")


@dataclass(frozen=True)
class AggregateOptions(Options):
    instruction: str
    max_tokens: int = DEFAULT_MAX_TOKENS


class AggregateFunction(AIFunction):
    request = Request.AGGREGATE
    sql_type = "VARCHAR"
    is_aggregate = True
    # DuckDB's Python API has no aggregate UDFs: aisql.register offers ai_agg(list(x), task) —
    # a scalar function over the group's list, answered exactly as the planned aggregate.
    duckdb_prompt_type = "VARCHAR[]"

    def prompt_from_value(self, values) -> str | None:
        """A group's list as the planned path sees it: its non-NULL values sorted, as JSON; None
        (the answer is NULL, as for a group without values) for an empty or all-NULL list."""
        import json

        present = sorted(v for v in values if v is not None)
        return json.dumps(present, ensure_ascii=False, separators=(",", ":")) if present else None

    def group_values(self, value: exp.Expression) -> exp.Expression:
        """The group's sorted non-NULL values as one JSON list (NULL for a group without any)."""
        text = exp.Cast(this=value, to=VARCHAR.copy())
        collected = exp.Filter(
            this=exp.ArrayAgg(this=text),
            expression=exp.Where(this=exp.Not(this=exp.Is(this=value.copy(), expression=exp.Null()))),
        )
        return exp.Anonymous(this="to_json", expressions=[exp.Anonymous(this="list_sort", expressions=[collected])])

    def filtered(self, collected: exp.Expression, condition: exp.Expression) -> exp.Expression:
        """`group_values` under a FILTER (WHERE condition) of the call: only the rows meeting it
        give values (`AI_AGG(v, task) FILTER (WHERE ...)`, as any SQL aggregate)."""
        collected = collected.copy()
        gather = collected.find(exp.Filter)
        gather.expression.set("this", exp.and_(gather.expression.this, exp.paren(condition.copy())))
        return collected

    def read_value(self, spelling: str, positional: list[exp.Expression], named: dict[str, exp.Expression], what: str) -> exp.Expression:
        """The values argument (positional, or Snowflake's `expr =>`)."""
        value = named.pop("expr", None) or (positional.pop(0) if positional else None)
        if value is None:
            raise BindError(f"{spelling} needs {what}", hint=f"e.g. {self.signature_hint}")
        return value

    def finish(self, spelling: str, positional: list[exp.Expression], named: dict[str, exp.Expression]) -> None:
        if positional or named:
            extra = positional[0].sql(dialect="duckdb") if positional else next(iter(named))
            raise BindError(f"{spelling}: too many arguments ({extra} is not expected)", hint=f"e.g. {self.signature_hint}")

    def read_instruction(self, spelling: str, node: exp.Expression | None) -> str:
        value = arguments.literal_value(node) if node is not None else None
        if not isinstance(value, str) or not value.strip():
            shown = node.sql(dialect="duckdb") if node is not None else "nothing"
            raise BindError(f"{spelling}: the task description must be a non-empty string literal, got {shown}", hint=f"e.g. {self.signature_hint}")
        return value.strip()

    def options_from_values(self, instruction=None, *rest) -> AggregateOptions:
        if not isinstance(instruction, str) or not instruction.strip():
            raise BindError(f"{self.duckdb_name}: the task description must be a non-empty string")
        return AggregateOptions(instruction.strip())

    def task(self, options: AggregateOptions) -> Task:
        return Task(self, Framing(system=SYSTEM), max_tokens=options.max_tokens, instruction=options.instruction)

    def output_tokens(self, options: AggregateOptions) -> float:
        return float(options.max_tokens)

    def value_from_text(self, task: Task, text: str) -> str:
        return text

    def describe_options(self, options: AggregateOptions) -> str:
        return f", {options.instruction!r}"
