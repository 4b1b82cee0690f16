"""AI_AGG(value, task_description) -> VARCHAR: an aggregate answering a task over a group's values
(Snowflake AI_AGG; LOTUS sem_agg), however many: groups larger than the context are reduced
hierarchically (aisql.executor.answers.aggregate)."""

from __future__ import annotations

from sqlglot import exp

from aisql.functions import arguments
from aisql.functions.aggregation import AggregateFunction, AggregateOptions
from aisql.functions.base import DuckDBParameter


class AiAgg(AggregateFunction):
    name = "AGG"
    spellings = ("AI_AGG", "AI.AGG")
    sqlglot_nodes = (exp.AIAgg,)
    signature_hint = "AI_AGG(review, 'Summarize the complaints in these reviews')"
    duckdb_name = "ai_agg"
    duckdb_parameters = (DuckDBParameter("task", "VARCHAR"),)

    def bind_arguments(self, spelling, positional, named):
        positional, named = list(positional), dict(named)
        value = self.read_value(spelling, positional, named, "the values to aggregate and a task description")
        description = named.pop("task_description", None) or (positional.pop(0) if positional else None)
        instruction = self.read_instruction(spelling, description)
        vendor = arguments.read_vendor_arguments(spelling, named)  # a model named (FlockMTL's llm_reduce)
        self.finish(spelling, positional, named)
        return self.group_values(value), AggregateOptions(instruction), {}, vendor


FUNCTION = AiAgg()
