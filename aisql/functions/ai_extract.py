"""AI_EXTRACT(text, responseFormat) -> STRUCT: answers to questions about a text, one field per
question (Snowflake AI_EXTRACT; LOTUS sem_extract).

`responseFormat` as Snowflake documents it: an object `{'name': 'What is the last name?', ...}`,
an array of questions (each its own field name), an array of [name, question] pairs, an array
of 'name: question' strings — a question starting with "List:" is a list of strings, every other
field VARCHAR — or a JSON schema, `{'schema': {'type': 'object', 'properties': {'name':
{'description': 'the question', 'type': 'string'}, ...}}}`, whose fields keep their types
(string, number, integer, boolean, or an array of one of them). NULL where the text does not say. Decoding is held to the
JSON document of those fields (aisql.engine.decoding.json_constraint), so every answer parses.

Snowflake returns an OBJECT `{"response": {...}, "error": null}`; aisql returns the response
STRUCT itself (the compatibility rule: plain values) — `AI_EXTRACT(...).name` reads a field.
Not supported, each a clear error: `file =>` (staged documents), nested objects in a schema
(Snowflake's table extraction).
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
        node = _parsed_json(spelling, node)
        schema = _schema_fields(spelling, node)
        if schema is not None:
            fields, pairs = [f for f, _ in schema], [(f.name, q) for f, q in schema]
        else:
            pairs = _questions(spelling, node)
            fields = [Field(name, "string", question.strip().lower().startswith("list:")) for name, question in pairs]
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


def _parsed_json(spelling: str, node: exp.Expression) -> exp.Expression:
    """A response format given as JSON text (Snowflake's `PARSE_JSON('{...}')`, `'{...}'::JSON`)
    read as the object or array it spells, so each written form takes it."""
    inner = node.this if isinstance(node, (exp.ParseJSON, exp.Cast)) else None
    if isinstance(node, exp.Cast) and not node.to.is_type(exp.DataType.Type.JSON, exp.DataType.Type.VARIANT):
        inner = None
    if not isinstance(inner, exp.Literal) or not inner.is_string:
        return node
    import json

    try:
        value = json.loads(inner.this)
    except ValueError as err:
        raise BindError(f"{spelling}: responseFormat is not valid JSON ({err})", hint=HINT) from None
    return _as_expression(value)


def _as_expression(value) -> exp.Expression:
    """A JSON value as the SQL literal Snowflake's forms are written in (an object is a struct)."""
    if isinstance(value, dict):
        return exp.Struct(expressions=[exp.PropertyEQ(this=exp.to_identifier(str(k)), expression=_as_expression(v)) for k, v in value.items()])
    if isinstance(value, list):
        return exp.Array(expressions=[_as_expression(v) for v in value])
    return exp.convert(value)


def _questions(spelling: str, node: exp.Expression) -> list[tuple[str, str]]:
    """(field name, question) pairs from the response format's four written forms."""
    if isinstance(node, exp.Struct):
        pairs = []
        for item in node.expressions:
            value = arguments.literal_value(item.expression) if isinstance(item, (exp.PropertyEQ, exp.Slice, exp.Kwarg)) else None
            if not isinstance(value, str):
                raise BindError(f"{spelling}: each responseFormat entry must be 'name': 'question'", hint=HINT)
            pairs.append((item.this.name, value))
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


JSON_TYPES = ("string", "number", "integer", "boolean")


def _schema_fields(spelling: str, node: exp.Expression) -> list[tuple[Field, str]] | None:
    """The JSON-schema form, `{'schema': {'type': 'object', 'properties': {...}}}` (also as a
    JSON string): each property a typed field, its description the question. None for the other
    forms."""
    value = arguments.constant_value(node)
    if isinstance(value, str) and value.lstrip().startswith("{"):
        import json

        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, dict) or set(k.lower() for k in value) != {"schema"}:
        return None
    schema = next(iter(value.values()))
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict) or not properties:
        raise BindError(f"{spelling}: the schema needs 'properties': {{'field': {{'description': '...', 'type': 'string'}}, ...}}", hint=HINT)
    out = []
    for name, spec in properties.items():
        if not isinstance(spec, dict):
            raise BindError(f"{spelling}: schema property {name!r} must be an object with a type", hint=HINT)
        kind, array = spec.get("type", "string"), False
        if kind == "array":
            items = spec.get("items") or {"type": "string"}
            kind, array = (items.get("type", "string") if isinstance(items, dict) else None), True
        if kind not in JSON_TYPES:
            raise BindError(
                f"{spelling}: schema property {name!r} has type {spec.get('type')!r}; supported: {', '.join(JSON_TYPES)} or an array of one",
                hint="nested objects (Snowflake's table extraction) are not supported",
            )
        question = spec.get("description") or name
        out.append((Field(str(name), kind, array), str(question)))
    return out


FUNCTION = AiExtract()
