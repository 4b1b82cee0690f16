"""AI.CLASSIFY(prompt, labels) -> VARCHAR: the most likely of the given labels.
(BigQuery AI.CLASSIFY, Snowflake AI_CLASSIFY with `categories`.)

Scored, not generated: every label is scored as the answer's continuation (labels of several
tokens by their full likelihood) and the most likely one is the value.

The framing is chosen by measured accuracy with a real small model (benchmarks/framing.py,
RESULTS.md §10): a system message listing the categories, the answer right after the assistant
header. (Beginning the reply "The answer is:" as AI.IF does made SmolLM2 pick the category with
the fewest tokens every time.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from sqlglot import exp

from aisql.errors import BindError
from aisql.engine.model.prompt_format import Framing
from aisql.functions import arguments, decision
from aisql.functions.base import AIFunction, DuckDBParameter, Options, Request, Task, best_label
from aisql.functions.decision import Decision

INSTRUCTION = "You are a careful data analyst. Classify the input into exactly one of these categories: {labels}. Answer with the category only."


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
        return Task(self, Framing(system=INSTRUCTION.format(labels=", ".join(options.labels))), options.labels)

    decides = True

    def value_from_scores(self, task: Task, logprobs: Sequence[float]) -> str:
        rule = task.decision
        if rule is not None and rule.offsets is not None:
            return task.labels[decision.argmax(decision.shifted(logprobs, rule.offsets))]
        return task.labels[best_label(logprobs)]

    def example_label(self, task: Task, value: Any) -> str:
        if isinstance(value, str):
            for label in task.labels:
                if value.strip().lower() == label.strip().lower():
                    return label
        raise ValueError(f"a label must be one of {list(task.labels)}, got {value!r}")

    def fit_decision(self, task: Task, rows: Sequence[Sequence[float]], labels: Sequence[str]) -> Decision:
        if len(set(labels)) < 2:
            raise ValueError("examples of at least two labels are needed")
        return Decision("examples", offsets=decision.fit_bias(rows, [task.labels.index(label) for label in labels]))

    def accepts_value(self, task: Task, value) -> bool:
        return isinstance(value, str) and value in task.labels

    def describe_options(self, options: ClassifyOptions) -> str:
        return f", {list(options.labels)}"


FUNCTION = AiClassify()
