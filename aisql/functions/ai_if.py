"""AI.IF(prompt) -> BOOLEAN: is the statement true of the row? (BigQuery AI.IF, Snowflake AI_FILTER)

Scored, not generated: one forward pass gives the probabilities of the two answer labels, and
the more likely one wins. As a predicate it filters rows in WHERE and joins them in JOIN ... ON.
"""

from __future__ import annotations

from typing import Sequence

from aisql.functions.base import AIFunction, Options, Request, Task, best_label

LABELS = ("TRUE", "FALSE")
INSTRUCTION = (
    "You are a careful data analyst. Decide whether the statement about the data is true. "
    "Answer TRUE or FALSE only."
)


class AiIf(AIFunction):
    name = "IF"
    spellings = ("AI.IF", "AI_FILTER", "AI_IF")
    sql_type = "BOOLEAN"
    request = Request.SCORE
    is_predicate = True
    duckdb_name = "ai_if"
    signature_hint = "AI.IF(PROMPT('... {column} ...'))"

    def task(self, options: Options) -> Task:
        return Task(self, INSTRUCTION, LABELS)

    def value_from_scores(self, task: Task, logprobs: Sequence[float]) -> bool:
        return best_label(logprobs) == 0


FUNCTION = AiIf()
