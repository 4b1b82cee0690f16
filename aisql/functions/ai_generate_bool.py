"""AI.GENERATE_BOOL(prompt) -> BOOLEAN: the model's answer decoded as a boolean literal (BigQuery
AI.GENERATE_BOOL; see aisql.functions.typed_generation)."""

from __future__ import annotations

from aisql.functions.base import DuckDBParameter, Task
from aisql.functions.typed_generation import TypedGenerate


class AiGenerateBool(TypedGenerate):
    name = "GENERATE_BOOL"
    spellings = ("AI.GENERATE_BOOL",)
    sql_type = "BOOLEAN"
    grammar = "bool"
    literal_words = "true or false"
    default_max_tokens = 4
    duckdb_name = "ai_generate_bool"
    duckdb_parameters = (DuckDBParameter("max_tokens", "INTEGER", "4"),)
    signature_hint = "AI.GENERATE_BOOL(('Is this review positive? ', review))"

    def value_from_text(self, task: Task, text: str) -> bool | None:
        word = text.strip().lower()
        return {"true": True, "false": False}.get(word)


FUNCTION = AiGenerateBool()
