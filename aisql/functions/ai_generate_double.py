"""AI.GENERATE_DOUBLE(prompt) -> DOUBLE: the model's answer decoded as a number literal (BigQuery
AI.GENERATE_DOUBLE; see aisql.functions.typed_generation)."""

from __future__ import annotations

import math

from aisql.functions.base import DuckDBParameter, Task
from aisql.functions.typed_generation import TypedGenerate


class AiGenerateDouble(TypedGenerate):
    name = "GENERATE_DOUBLE"
    spellings = ("AI.GENERATE_DOUBLE",)
    sql_type = "DOUBLE"
    grammar = "double"
    literal_words = "a number"
    default_max_tokens = 16
    duckdb_name = "ai_generate_double"
    duckdb_parameters = (DuckDBParameter("max_tokens", "INTEGER", "16"),)
    signature_hint = "AI.GENERATE_DOUBLE(('What price does this review mention? ', review))"

    def value_from_text(self, task: Task, text: str) -> float | None:
        try:
            value = float(text.strip())
        except ValueError:
            return None
        return value if math.isfinite(value) else None


FUNCTION = AiGenerateDouble()
