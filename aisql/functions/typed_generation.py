"""What BigQuery's AI.GENERATE_BOOL / _INT / _DOUBLE share: greedy decoding constrained to a
literal of the type (aisql.engine.decoding.constrained), the literal read as the SQL value.

The framing asks for the literal alone and begins the reply "The answer is:" (as AI.IF's, chosen
by measured accuracy with SmolLM2); the constraint then makes every answer a literal — the
model's most likely one, token by token — so no row fails to parse. A literal cut short by
max_tokens, or one out of the type's range, is NULL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from sqlglot import exp

from aisql.engine.model.prompt_format import Framing
from aisql.functions import arguments
from aisql.functions.base import AIFunction, Options, Request, Task


@dataclass(frozen=True)
class TypedOptions(Options):
    max_tokens: int


class TypedGenerate(AIFunction):
    """A GENERATE function whose answer is a literal of `grammar`'s type."""

    grammar: ClassVar[str]
    default_max_tokens: ClassVar[int] = 24
    request = Request.GENERATE

    @property
    def framing(self) -> Framing:
        return Framing(system=None, suffix=f"\n\nAnswer with {self.literal_words} only.", answer_prefix="The answer is:")

    literal_words: ClassVar[str]

    def read_options(self, spelling: str, positional: list[exp.Expression], named: dict[str, exp.Expression]) -> TypedOptions:
        node = named.pop("max_tokens", None) or named.pop("max_output_tokens", None)
        return TypedOptions(self.default_max_tokens if node is None else arguments.read_max_tokens(spelling, node))

    def options_from_values(self, max_tokens: Any = None, *rest: Any) -> TypedOptions:
        return TypedOptions(arguments.check_max_tokens(self.duckdb_name, max_tokens if max_tokens is not None else self.default_max_tokens))

    def task(self, options: TypedOptions) -> Task:
        return Task(self, self.framing, max_tokens=options.max_tokens, grammar=self.grammar)

    def output_tokens(self, options: TypedOptions) -> float:
        return float(options.max_tokens)

    def describe_options(self, options: TypedOptions) -> str:
        return f", max_tokens => {options.max_tokens}"

