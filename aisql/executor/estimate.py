"""Count an AI node's input without running a model (for `aisql explain`).

Runs the node's estimate query — its input with every AI answer unknown — in DuckDB. The count is
exact when no AI filter had to be dropped from it, an upper bound otherwise, and unknown when the
input itself depends on AI answers (e.g. it reads a CTE filtered by AI).
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from aisql.executor.prompts import PromptSet
from aisql.planner.plan import AINode, Strategy


@dataclass(frozen=True)
class InputEstimate:
    rows_in: int | None
    prompts_total: int | None
    prompts_unique: int | None
    quality: str  # "exact" | "upper bound" | "unknown"
    reason: str = ""


def estimate_input(con: duckdb.DuckDBPyConnection, node: AINode) -> InputEstimate:
    if node.estimate_sql is None:
        return InputEstimate(None, None, None, "unknown", "its rows depend on other AI answers")
    try:
        table = con.sql(node.estimate_sql).to_arrow_table()
    except duckdb.Error as err:
        return InputEstimate(None, None, None, "unknown", str(err).splitlines()[0])
    arity = node.call.arity
    columns = [table.column(i).to_pylist() for i in range(arity)]
    counts = table.column(arity).to_pylist()
    prompts = PromptSet.from_rows(node.call.template, zip(zip(*columns), counts))
    upper = node.estimate_is_upper_bound or node.strategy is Strategy.STREAMING
    reason = ""
    if node.estimate_is_upper_bound:
        reason = "AI filters that run before it are assumed TRUE"
    elif node.strategy is Strategy.STREAMING:
        reason = node.note
    return InputEstimate(
        rows_in=prompts.rows_in,
        prompts_total=prompts.prompts_total,
        prompts_unique=len(prompts.counts),
        quality="upper bound" if upper else "exact",
        reason=reason,
    )
