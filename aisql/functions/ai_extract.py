"""AI_EXTRACT(text, responseFormat) -> STRUCT: answers to questions about a text, one field per
question (Snowflake AI_EXTRACT; LOTUS sem_extract).

`responseFormat` as Snowflake documents it: an object `{'name': 'What is the last name?', ...}`,
an array of questions (each its own field name), an array of [name, question] pairs, or an array
of 'name: question' strings; a question starting with "List:" is a list of strings. Every field
is VARCHAR (VARCHAR[] for lists) and NULL where the text does not say. Decoding is held to the
JSON document of those fields (aisql.engine.decoding.json_constraint), so every answer parses.

Snowflake returns an OBJECT `{"response": {...}, "error": null}`; aisql returns the response
STRUCT itself (the compatibility rule: plain values) — `AI_EXTRACT(...).name` reads a field.
Snowflake's JSON-schema form and `file =>` (staged documents) are not supported: a clear error.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from aisql.engine.decoding.json_document import JSON_PREFIX, Field, fields_of, grammar_of
from aisql.engine.model.prompt_format import Framing
from aisql.errors import BindError
from aisql.functions import arguments, structured_output
from aisql.functions.base import AIFunction, Options, Request, Task

INSTRUCTION = (
    "You extract information from a text. Answer with a JSON object with one key per question; "
    "the value is the answer taken from the text, or null where the text does not answer it."
)
TOKENS_PER_FIELD = 48
HINT = "e.g. AI_EXTRACT(review, {'product': 'Which product is reviewed?', 'issues': 'List: what went wrong?'})"


@dataclass(frozen=True)
class ExtractOptions(Options):
    fields: tuple[Field, ...]
    questions: tuple[str, ...]
    max_tokens: int


class AiExtract(AIFunction):
    name = "EXTRACT"
    spellings = ("AI_EXTRACT", "AI.EXTRACT")
    sql_type = "STRUCT"  # the fields' STRUCT (result_type)
    request = Request.GENERATE
    duckdb_name = None  # its result type depends on the response format: planned SQL only
    signature_hint = HINT

    def bind_arguments(self, spelling, positional, named):
        positional, named = list(positional), dict(named)
        if "file" in named:
            raise BindError(f"{spelling}: file => (staged documents) is not supported; pass the text", hint=HINT)
        if "text" in named:
            named["prompt"] = named.pop("text")
        for key in ("responseformat", "response_format"):
            if key in named:
                named["__format"] = named.pop(key)
        return super().bind_arguments(spelling, positional, named)

    def read_options(self, spelling, positional, named) -> ExtractOptions:
        node = named.pop("__format", None)
        if node is None and positional:
            node = positional.pop(0)
        if node is None:
            raise BindError(f"{spelling} needs a response format: the questions to answer", hint=HINT)
        pairs = _questions(spelling, node)
        fields = []
        for name, question in pairs:
            is_list = question.strip().lower().startswith("list:")
            fields.append(Field(name, "string", is_list))
        checked = structured_output.check_fields(spelling, fields)
        budget_node = named.pop("max_tokens", None)
        budget = arguments.read_max_tokens(spelling, budget_node) if budget_node is not None else min(arguments.MAX_MAX_TOKENS, 16 + TOKENS_PER_FIELD * len(checked))
        return ExtractOptions(checked, tuple(q for _, q in pairs), budget)

    def task(self, options: ExtractOptions) -> Task:
        lines = "\n".join(f"- {f.name}: {q}" for f, q in zip(options.fields, options.questions))
        framing = Framing(system=INSTRUCTION, suffix=f"\n\nQuestions:\n{lines}")
        return Task(self, framing, max_tokens=options.max_tokens, grammar=grammar_of(options.fields))

    def output_tokens(self, options: ExtractOptions) -> float:
        return float(options.max_tokens)

    def result_type(self, options: ExtractOptions, dimension: int | None = None):
        return structured_output.struct_types(options.fields)

    def value_from_text(self, task: Task, text: str):
        assert task.grammar and task.grammar.startswith(JSON_PREFIX)
        return structured_output.value_from_json(fields_of(task.grammar), text)

    def accepts_value(self, task: Task, value) -> bool:
        if task.grammar and task.grammar.startswith(JSON_PREFIX):
            return value is None or structured_output.fits(fields_of(task.grammar), value)
        return super().accepts_value(task, value)

    def describe_options(self, options: ExtractOptions) -> str:
        return ", {" + ", ".join(f"'{f.name}': {q!r}" for f, q in zip(options.fields, options.questions)) + "}"


def _questions(spelling: str, node: exp.Expression) -> list[tuple[str, str]]:
    """(field name, question) pairs from the response format's four written forms."""
    if isinstance(node, exp.Struct):
        pairs = []
        for item in node.expressions:
            value = arguments.literal_value(item.expression) if isinstance(item, (exp.PropertyEQ, exp.Slice, exp.Kwarg)) else None
            if not isinstance(value, str):
                raise BindError(f"{spelling}: each responseFormat entry must be 'name': 'question'", hint=HINT)
            key = item.this.name
            if key.lower() == "schema":
                raise BindError(f"{spelling}: the JSON-schema form of responseFormat is not supported; give questions", hint=HINT)
            pairs.append((key, value))
        return pairs
    if isinstance(node, exp.Array):
        pairs = []
        for item in node.expressions:
            if isinstance(item, exp.Array) and len(item.expressions) == 2:
                name, question = (arguments.literal_value(x) for x in item.expressions)
            else:
                text = arguments.literal_value(item)
                if not isinstance(text, str):
                    raise BindError(f"{spelling}: responseFormat items must be strings or [name, question] pairs", hint=HINT)
                name, sep, rest = text.partition(":")
                if sep and name.strip() and " " not in name.strip() and name.strip().lower() != "list":
                    name, question = name.strip(), rest.strip()
                else:
                    name, question = text, text
            if not isinstance(name, str) or not isinstance(question, str):
                raise BindError(f"{spelling}: responseFormat items must be strings or [name, question] pairs", hint=HINT)
            pairs.append((name, question))
        return pairs
    raise BindError(f"{spelling}: responseFormat must be an object or an array of questions, got {node.sql(dialect='duckdb')}", hint=HINT)


FUNCTION = AiExtract()
