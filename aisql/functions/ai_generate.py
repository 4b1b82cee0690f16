"""AI.GENERATE(prompt [, max_tokens]) -> VARCHAR: the model's answer, decoded greedily.
(BigQuery AI.GENERATE, Snowflake AI_COMPLETE.)

With BigQuery's `output_schema => 'name STRING, year INT64'` the answer is a STRUCT of those
fields: decoding is held to the schema's JSON document (aisql.engine.decoding.json_constraint), so every
answer parses; BigQuery's own STRUCT adds `full_response` and `status`, which aisql leaves out
(the compatibility rule: plain values; `.name` reads a field as in BigQuery).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from aisql.engine.decoding.json_document import JSON_PREFIX, Field, fields_of, grammar_of
from aisql.engine.model.prompt_format import Framing
from aisql.errors import BindError
from aisql.functions import arguments, structured_output
from aisql.functions.base import AIFunction, DuckDBParameter, Options, Request, Task

DEFAULT_MAX_TOKENS = 128
DEFAULT_SCHEMA_MAX_TOKENS = 256  # a document of several fields needs more room than a sentence
INSTRUCTION = "You are a helpful assistant. Answer concisely."


@dataclass(frozen=True)
class GenerateOptions(Options):
    max_tokens: int = DEFAULT_MAX_TOKENS
    sampling: tuple[float, float, int] | None = None  # (temperature, top_p, seed); None: greedy
    schema: tuple[Field, ...] | None = None  # output_schema: the answer is a STRUCT of these fields


class AiGenerate(AIFunction):
    name = "GENERATE"
    spellings = ("AI.GENERATE", "AI_COMPLETE", "AI_GENERATE")
    sqlglot_nodes = (exp.AIGenerate,)
    sql_type = "VARCHAR"
    request = Request.GENERATE
    samples = True
    duckdb_name = "ai_generate"
    duckdb_parameters = (DuckDBParameter("max_tokens", "INTEGER", str(DEFAULT_MAX_TOKENS)),)
    signature_hint = "AI.GENERATE(prompt, max_tokens => 64)"

    def bind_arguments(self, spelling, positional, named):
        """Snowflake's `AI_COMPLETE(model, prompt [, model_parameters])` names the model first: a
        string literal followed by another argument that is not a token budget. The model must
        be the run's (checked like BigQuery's `endpoint`)."""
        model = None
        if spelling.upper() == "AI_COMPLETE" and len(positional) >= 2 and isinstance(positional[0], exp.Literal) and positional[0].is_string:
            second = arguments.literal_value(positional[1])
            if not isinstance(second, int):
                positional = list(positional)
                model = positional.pop(0).this
                if len(positional) >= 2 and isinstance(positional[1], exp.Struct):  # model_parameters
                    params = positional.pop(1)
                    for item in params.expressions:
                        key = item.this.name.lower() if hasattr(item, "this") else ""
                        if key == "max_tokens":
                            named.setdefault("max_tokens", item.expression)
                        elif key in ("temperature", "top_p", "seed"):
                            named.setdefault(key, item.expression)
                        else:
                            named.setdefault("__ignored_" + key, item.expression)
        ignored = [key[len("__ignored_") :] for key in list(named) if key.startswith("__ignored_")]
        for key in ignored:
            named.pop("__ignored_" + key)
        prompt, options, hints, vendor = super().bind_arguments(spelling, positional, named)
        if model is not None or ignored:
            notes = vendor.notes + tuple(f"{spelling}: model_parameters.{key} ignored (aisql answers deterministically, greedy)" for key in ignored)
            vendor = dataclasses.replace(vendor, endpoint=model or vendor.endpoint, notes=notes)
        return prompt, options, hints, vendor

    def read_options(self, spelling: str, positional: list[exp.Expression], named: dict[str, exp.Expression]) -> GenerateOptions:
        node = named.pop("max_tokens", None) or named.pop("max_output_tokens", None)
        if node is None and positional and not isinstance(positional[0], exp.Struct):
            node = positional.pop(0)
        sampling = arguments.read_sampling(spelling, named)
        schema = None
        schema_node = named.pop("output_schema", None)
        if schema_node is not None:
            text = arguments.literal_value(schema_node)
            if not isinstance(text, str):
                raise BindError(f"{spelling}: output_schema must be a string literal, got {schema_node.sql(dialect='duckdb')}", hint="e.g. output_schema => 'name STRING, year INT64'")
            schema = structured_output.parse_output_schema(spelling, text)
            if sampling is not None:
                raise BindError(f"{spelling}: output_schema decodes greedily; temperature > 0 is not supported with it")
        default = DEFAULT_SCHEMA_MAX_TOKENS if schema else DEFAULT_MAX_TOKENS
        return GenerateOptions(default if node is None else arguments.read_max_tokens(spelling, node), sampling, schema)

    def options_from_values(self, max_tokens: Any = DEFAULT_MAX_TOKENS, *rest: Any) -> GenerateOptions:
        return GenerateOptions(arguments.check_max_tokens(self.duckdb_name, max_tokens))

    def task(self, options: GenerateOptions) -> Task:
        if options.schema:
            suffix = f"\n\nAnswer with a JSON object with the fields {structured_output.describe_fields(options.schema)}."
            return Task(self, Framing(system=INSTRUCTION, suffix=suffix), max_tokens=options.max_tokens, grammar=grammar_of(options.schema))
        return Task(self, Framing(system=INSTRUCTION), max_tokens=options.max_tokens, sampling=options.sampling)

    def result_type(self, options: GenerateOptions, dimension: int | None = None):
        if options.schema:
            return structured_output.struct_types(options.schema)
        return super().result_type(options)

    def output_tokens(self, options: GenerateOptions) -> float:
        return float(options.max_tokens)

    def value_from_text(self, task: Task, text: str):
        if task.grammar and task.grammar.startswith(JSON_PREFIX):
            return structured_output.value_from_json(fields_of(task.grammar), text)
        return text

    def accepts_value(self, task: Task, value) -> bool:
        if task.grammar and task.grammar.startswith(JSON_PREFIX):
            return value is None or structured_output.fits(fields_of(task.grammar), value)
        return super().accepts_value(task, value)

    def describe_options(self, options: GenerateOptions) -> str:
        sampled = ""
        if options.sampling:
            temperature, top_p, seed = options.sampling
            sampled = f", temperature => {temperature:g}, top_p => {top_p:g}, seed => {seed}"
        schema = ""
        if options.schema:
            schema = ", output_schema => '" + ", ".join(f"{f.name} {'ARRAY<' if f.array else ''}{f.kind.upper()}{'>' if f.array else ''}" for f in options.schema) + "'"
        return f", max_tokens => {options.max_tokens}{sampled}{schema}"


FUNCTION = AiGenerate()
