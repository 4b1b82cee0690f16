"""AI.CLASSIFY(prompt, labels) -> VARCHAR: the most likely of the given labels.
(BigQuery AI.CLASSIFY, Snowflake AI_CLASSIFY with `categories`.)

Scored, not generated: every label is scored as the answer's continuation (labels of several
tokens by their full likelihood) and the most likely one is the value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from sqlglot import exp

from aisql.errors import BindError
from aisql.engine.prompt_format import Framing
from aisql.functions import arguments
from aisql.functions.base import AIFunction, DuckDBParameter, Options, Request, Task, best_label

# The user's prompt, then the categories; the reply begun so that a category comes next.
SUFFIX = "\n\nAnswer with one of these categories: {labels}."
ANSWER_PREFIX = "The answer is:"


@dataclass(frozen=True)
class ClassifyOptions(Options):
    labels: tuple[str, ...]


class AiClassify(AIFunction):
    name = "CLASSIFY"
    spellings = ("AI.CLASSIFY", "AI_CLASSIFY")
    sqlglot_nodes = (exp.AIClassify,)
    sql_type = "VARCHAR"
    request = Request.SCORE
    duckdb_name = "ai_classify"
    duckdb_parameters = (DuckDBParameter("labels", "VARCHAR[]"),)
    signature_hint = "AI.CLASSIFY(prompt, ['yes', 'no'])"

    def read_options(self, spelling: str, positional: list[exp.Expression], named: dict[str, exp.Expression]) -> ClassifyOptions:
        node = named.pop("categories", None) or named.pop("labels", None)
        if node is None:
            if not positional:
                raise BindError(f"{spelling} needs a list of labels", hint=f"e.g. {spelling}(prompt, ['yes', 'no'])")
            node = positional.pop(0)
        return ClassifyOptions(arguments.read_labels(spelling, node))

    def options_from_values(self, labels: Any = None, *rest: Any) -> ClassifyOptions:
        return ClassifyOptions(arguments.check_labels(self.duckdb_name, list(labels or [])))

    def task(self, options: ClassifyOptions) -> Task:
        listed = ", ".join(options.labels)
        framing = Framing(system=None, suffix=SUFFIX.format(labels=listed), answer_prefix=ANSWER_PREFIX, label_prefix=" ")
        return Task(self, framing, options.labels)

    def value_from_scores(self, task: Task, logprobs: Sequence[float]) -> str:
        return task.labels[best_label(logprobs)]

    def describe_options(self, options: ClassifyOptions) -> str:
        return f", {list(options.labels)}"


FUNCTION = AiClassify()
