"""AI.CLASSIFY(prompt, labels) -> VARCHAR: the most likely of the given labels.
(BigQuery AI.CLASSIFY, Snowflake AI_CLASSIFY with `categories`.)

The labels as the vendors write them: a list of strings; labels with descriptions (Snowflake's
`[{'label': 'travel', 'description': 'trips and places'}, ...]`, BigQuery's `[('travel', 'trips
and places'), ...]`), the descriptions listed beside the categories; or any expression that is
the same for every row (`string_split('a,b', ',')`, `(SELECT list(name) FROM categories)`),
computed once by DuckDB before the node runs. Snowflake's config object (`{'task_description':
..., 'output_mode': 'single'}`) and BigQuery's `output_mode =>`: the task description leads the
instruction; `'multi'` is rewritten before binding into one yes/no per category
(aisql.sql.multi_label).

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
    descriptions: tuple[str | None, ...] = ()  # one per label where any is given
    task_description: str | None = None


def read_categories(spelling: str, node: exp.Expression) -> tuple[tuple[str, ...], tuple[str | None, ...]]:
    """(labels, descriptions — empty when none is given) from a list of strings, of
    {'label', 'description'} objects or (label, description) pairs, or an expression that is the
    same for every row, computed once."""
    value = arguments.constant_value(node)
    if value is arguments.NOT_CONSTANT:
        value = arguments.evaluate_constant(spelling, node, "labels")
    if not isinstance(value, (list, tuple)):
        raise BindError(f"{spelling}: labels must be a list, got {node.sql(dialect='duckdb')}", hint="e.g. ['positive', 'negative']")
    labels: list[str] = []
    descriptions: list[str | None] = []
    for item in value:
        if isinstance(item, dict):
            unknown = set(item) - {"label", "description"}
            if unknown or not isinstance(item.get("label"), str):
                raise BindError(f"{spelling}: a category object needs 'label' (and may have 'description'), got {item!r}")
            label, description = item["label"], item.get("description")
        elif isinstance(item, (list, tuple)) and 1 <= len(item) <= 2:
            label, description = item[0], item[1] if len(item) == 2 else None
        else:
            label, description = item, None
        if not (label is None or isinstance(label, str)) or not (description is None or isinstance(description, str)):
            raise BindError(f"{spelling}: labels must be strings, got {item!r}", hint="e.g. ['positive', 'negative'] or [{'label': 'x', 'description': '...'}]")
        labels.append(label)
        descriptions.append(description)
    checked = arguments.check_labels(spelling, labels)
    return checked, tuple(descriptions) if any(d for d in descriptions) else ()


def read_config(spelling: str, named: dict[str, exp.Expression], positional: list[exp.Expression]) -> str | None:
    """The task description and output mode (BigQuery's named arguments, Snowflake's config
    object, whose other keys stay for the planner hints). Returns the task description."""
    found: dict[str, exp.Expression] = {key: named.pop(key) for key in ("task_description", "output_mode") if key in named}
    if positional and isinstance(positional[0], exp.Struct):
        config = positional[0]
        for item in list(config.expressions):
            key = item.this.name.lower() if isinstance(item, (exp.PropertyEQ, exp.Slice, exp.Kwarg)) else None
            if key in ("task_description", "output_mode"):
                found[key] = item.expression
                item.pop()
            elif key == "examples":
                if "examples" in named:
                    raise BindError(f"{spelling}: examples given twice (in the config object and as examples =>)")
                named["examples"] = snowflake_examples(spelling, item.expression, multi=False)
                item.pop()
        if not config.expressions:
            positional.pop(0)
    mode = arguments.literal_value(found["output_mode"]) if "output_mode" in found else "single"
    if not isinstance(mode, str) or mode.lower() not in ("single", "multi"):
        raise BindError(f"{spelling}: output_mode must be 'single' or 'multi'")
    if mode.lower() == "multi":
        raise BindError(f"{spelling}: output_mode 'multi' needs its labels written in the call", hint="a list, or an expression that is the same for every row")
    if "task_description" not in found:
        return None
    task = arguments.literal_value(found["task_description"])
    if not isinstance(task, str) or not task.strip():
        raise BindError(f"{spelling}: task_description must be a non-empty string literal")
    return task.strip()


def snowflake_examples(spelling: str, node: exp.Expression, multi: bool) -> exp.Expression:
    """Snowflake's config examples, `[{'input': ..., 'labels': [...], 'explanation': ...}]`, as
    aisql's labelled examples `[{'input': ..., 'label': ...}]`: the one label (single mode) or the
    list (multi: each category's question reads whether its label is in it). The explanation is
    for Snowflake's prompt; aisql's examples teach the decision rule, not the prompt."""
    hint = "e.g. {'examples': [{'input': 'I flew to Rome', 'labels': ['travel']}]}"
    if not isinstance(node, exp.Array) or not node.expressions:
        raise BindError(f"{spelling}: the config's examples must be a list of objects", hint=hint)
    converted = []
    for item in node.expressions:
        fields = {p.this.name.lower(): p.expression for p in item.expressions if isinstance(p, (exp.PropertyEQ, exp.Slice, exp.Kwarg))} if isinstance(item, exp.Struct) else {}
        if "input" not in fields or "labels" not in fields:
            raise BindError(f"{spelling}: a config example needs 'input' and 'labels', got {item.sql(dialect='duckdb')}", hint=hint)
        labels = fields["labels"]
        if not multi and isinstance(labels, exp.Array):
            if len(labels.expressions) != 1:
                raise BindError(f"{spelling}: a single-label example has one label, got {labels.sql(dialect='duckdb')}", hint="output_mode 'multi' takes several")
            labels = labels.expressions[0]
        if multi and isinstance(labels, exp.Literal):  # one label written bare
            labels = exp.Array(expressions=[labels])
        converted.append(exp.Struct(expressions=[
            exp.PropertyEQ(this=exp.to_identifier("input"), expression=fields["input"].copy()),
            exp.PropertyEQ(this=exp.to_identifier("label"), expression=labels.copy()),
        ]))
    return exp.Array(expressions=converted)


def categories_text(labels: Sequence[str], descriptions: Sequence[str | None]) -> str:
    if not descriptions:
        return ", ".join(labels)
    return "; ".join(f"{label} ({description})" if description else label for label, description in zip(labels, descriptions))


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
        labels, descriptions = read_categories(spelling, node)
        return ClassifyOptions(labels, descriptions, read_config(spelling, named, positional))

    def options_from_values(self, labels: Any = None, *rest: Any) -> ClassifyOptions:
        return ClassifyOptions(arguments.check_labels(self.duckdb_name, list(labels or [])))

    def task(self, options: ClassifyOptions) -> Task:
        instruction = INSTRUCTION.format(labels=categories_text(options.labels, options.descriptions))
        if options.task_description:
            instruction = f"{options.task_description}\n{instruction}"
        return Task(self, Framing(system=instruction), options.labels)

    def possible_values(self, options: ClassifyOptions) -> tuple[Any, ...]:
        return tuple(options.labels)

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
        raise ValueError(f"a label must be one of {arguments.shown_list(task.labels)}, got {value!r}")

    def fit_decision(self, task: Task, rows: Sequence[Sequence[float]], labels: Sequence[str]) -> Decision:
        if len(set(labels)) < 2:
            raise ValueError("examples of at least two labels are needed")
        return Decision("examples", offsets=decision.fit_bias(rows, [task.labels.index(label) for label in labels]))

    def accepts_value(self, task: Task, value) -> bool:
        return isinstance(value, str) and value in task.labels

    def describe_options(self, options: ClassifyOptions) -> str:
        described = f", {arguments.shown_list(options.labels)}"
        if options.descriptions:
            described += f", descriptions {arguments.shown_list(options.descriptions)}"
        if options.task_description:
            described += f", task_description {options.task_description!r}"
        return described


FUNCTION = AiClassify()
