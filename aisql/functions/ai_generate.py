"""AI.GENERATE(prompt [, max_tokens]) -> VARCHAR: the model's answer, decoded greedily.
(BigQuery AI.GENERATE, Snowflake AI_COMPLETE.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from aisql.engine.prompt_format import Framing
from aisql.functions import arguments
from aisql.functions.base import AIFunction, DuckDBParameter, Options, Request, Task

DEFAULT_MAX_TOKENS = 128
INSTRUCTION = "You are a helpful assistant. Answer concisely."


@dataclass(frozen=True)
class GenerateOptions(Options):
    max_tokens: int = DEFAULT_MAX_TOKENS


class AiGenerate(AIFunction):
    name = "GENERATE"
    spellings = ("AI.GENERATE", "AI_COMPLETE", "AI_GENERATE")
    sqlglot_nodes = (exp.AIGenerate,)
    sql_type = "VARCHAR"
    request = Request.GENERATE
    duckdb_name = "ai_generate"
    duckdb_parameters = (DuckDBParameter("max_tokens", "INTEGER", str(DEFAULT_MAX_TOKENS)),)
    signature_hint = "AI.GENERATE(prompt, max_tokens => 64)"

    def read_options(self, spelling: str, positional: list[exp.Expression], named: dict[str, exp.Expression]) -> GenerateOptions:
        node = named.pop("max_tokens", None) or named.pop("max_output_tokens", None)
        if node is None and positional and not isinstance(positional[0], exp.Struct):
            node = positional.pop(0)
        return GenerateOptions(DEFAULT_MAX_TOKENS if node is None else arguments.read_max_tokens(spelling, node))

    def options_from_values(self, max_tokens: Any = DEFAULT_MAX_TOKENS, *rest: Any) -> GenerateOptions:
        return GenerateOptions(arguments.check_max_tokens(self.duckdb_name, max_tokens))

    def task(self, options: GenerateOptions) -> Task:
        return Task(self, Framing(system=INSTRUCTION), max_tokens=options.max_tokens)

    def output_tokens(self, options: GenerateOptions) -> float:
        return float(options.max_tokens)

    def value_from_text(self, task: Task, text: str) -> str:
        return text

    def describe_options(self, options: GenerateOptions) -> str:
        return f", max_tokens => {options.max_tokens}"


FUNCTION = AiGenerate()
