"""AI.GENERATE_INT(prompt) -> BIGINT: the model's answer decoded as an integer literal (BigQuery
AI.GENERATE_INT; see aisql.functions.typed_generation)."""

from __future__ import annotations

from aisql.functions.base import DuckDBParameter, Task
from aisql.functions.typed_generation import TypedGenerate

INT64 = (-(2**63), 2**63 - 1)


class AiGenerateInt(TypedGenerate):
    name = "GENERATE_INT"
    spellings = ("AI.GENERATE_INT",)
    sql_type = "BIGINT"
    grammar = "int"
    literal_words = "a whole number"
    default_max_tokens = 12
    duckdb_name = "ai_generate_int"
    duckdb_parameters = (DuckDBParameter("max_tokens", "INTEGER", "12"),)
    signature_hint = "AI.GENERATE_INT(('How many people are in this review? ', review))"

    def value_from_text(self, task: Task, text: str) -> int | None:
        try:
            value = int(text.strip())
        except ValueError:
            return None
        return value if INT64[0] <= value <= INT64[1] else None


FUNCTION = AiGenerateInt()
