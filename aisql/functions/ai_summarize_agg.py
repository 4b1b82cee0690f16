"""AI_SUMMARIZE_AGG(value) -> VARCHAR: a summary of a group's values (Snowflake AI_SUMMARIZE_AGG):
AI_AGG with a fixed, general task description."""

from __future__ import annotations

from sqlglot import exp

from aisql.functions import arguments
from aisql.functions.aggregation import AggregateFunction, AggregateOptions

SUMMARIZE = "Summarize these texts in a few sentences."


class AiSummarizeAgg(AggregateFunction):
    name = "SUMMARIZE_AGG"
    spellings = ("AI_SUMMARIZE_AGG", "AI.SUMMARIZE_AGG")
    sqlglot_nodes = (exp.AISummarizeAgg,)
    signature_hint = "AI_SUMMARIZE_AGG(review)"
    duckdb_name = "ai_summarize_agg"

    def options_from_values(self, *rest) -> AggregateOptions:
        return AggregateOptions(SUMMARIZE)

    def bind_arguments(self, spelling, positional, named):
        positional, named = list(positional), dict(named)
        value = self.read_value(spelling, positional, named, "the values to summarize")
        self.finish(spelling, positional, named)
        return self.group_values(value), AggregateOptions(SUMMARIZE), {}, arguments.VendorArguments()


FUNCTION = AiSummarizeAgg()
