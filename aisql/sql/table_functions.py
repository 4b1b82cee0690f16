"""BigQuery's table-valued generation functions, read as a subquery over aisql's AI.GENERATE.

    SELECT * FROM AI.GENERATE_TEXT(MODEL `p.d.gemini`, TABLE `p.d.reviews` | (SELECT ... AS prompt ...),
                                   STRUCT(TRUE AS flatten_json_output, 64 AS max_output_tokens))
    SELECT * FROM AI.GENERATE_TABLE(MODEL `p.d.gemini`, (SELECT ... AS prompt ...),
                                    STRUCT('name STRING, age INT64' AS output_schema))

(and `ML.GENERATE_TEXT`, the older name) become

    (SELECT * EXCLUDE (__aisql_generated), <output columns> FROM
       (SELECT *, AI.GENERATE(prompt, max_tokens => 64, endpoint => 'gemini') AS __aisql_generated FROM <input>))

so each row's `prompt` column is one planned, deduplicated, cached AI.GENERATE call. The output
columns, as BigQuery documents them: GENERATE_TEXT adds `ml_generate_text_llm_result` (STRING)
with `flatten_json_output => TRUE`, else `ml_generate_text_result` (JSON shaped as the Gemini
response: `$.candidates[0].content.parts[0].text` reads the text), and `ml_generate_text_status`
('' : no error). GENERATE_TABLE adds one column per `output_schema` field, `full_response` (the
answer as JSON) and `status`. The model named is a model name like `endpoint =>` (--model-map);
`temperature`, `top_p` and `max_output_tokens` are read as AI.GENERATE's; other settings
(safety_settings, stop_sequences, request_type, ...) are ignored with a note.
"""

from __future__ import annotations

from sqlglot import exp

from aisql.errors import BindError
from aisql.functions import arguments

GENERATED = "__aisql_generated"
READ = {"max_output_tokens": "max_tokens", "temperature": "temperature", "top_p": "top_p", "output_schema": "output_schema"}


def translate(ast: exp.Expression, at) -> list[str]:
    """Rewrite the table-valued generation calls in `ast`, in place; the notes to say."""
    notes: list[str] = []
    # Innermost first: a generation over another's output (GENERATE_TEXT over GENERATE_TEXT) is
    # rewritten inside its input before the outer call copies that input; outermost first would
    # copy the inner call as BigQuery wrote it, and DuckDB would be handed BigQuery's text.
    for node in reversed(list(ast.find_all(exp.GenerateText, exp.GenerateTable, bfs=False))):
        table = node.parent if isinstance(node.parent, exp.Table) else None
        spelling = f"{(table.text('db') or 'AI').upper()}.{'GENERATE_TABLE' if isinstance(node, exp.GenerateTable) else 'GENERATE_TEXT'}"
        where = _position(node, table, at)
        settings = _settings(spelling, node.args.get("params_struct"), where)
        model = node.this.name if isinstance(node.this, exp.Table) else None
        named = [exp.Kwarg(this=exp.var("endpoint"), expression=exp.Literal.string(model))] if model else []
        for key, target in READ.items():
            if key in settings:
                named.append(exp.Kwarg(this=exp.var(target), expression=settings.pop(key)))
        flatten = settings.pop("flatten_json_output", None)
        if settings:
            notes.append(f"{spelling}: {', '.join(sorted(settings))} ignored (aisql answers deterministically with its own model)")
        if isinstance(node, exp.GenerateTable) and not any(k.this.name == "output_schema" for k in named):
            raise BindError(f"{spelling} needs STRUCT('...' AS output_schema)", **where, hint="e.g. STRUCT('name STRING, age INT64' AS output_schema)")
        source = node.expression
        _needs_a_prompt_column(spelling, source, where)
        source = source.copy() if isinstance(source, exp.Subquery) else exp.Table(**{k: v.copy() for k, v in source.args.items() if v is not None and k in ("this", "db", "catalog")})
        call = exp.Dot(this=exp.to_identifier("AI"), expression=exp.Anonymous(this="GENERATE", expressions=[exp.column("prompt")] + named))
        call.meta.update(node.meta, written_as=spelling)
        inner = exp.select(exp.Star(), exp.alias_(call, GENERATED)).from_(source)
        outer = exp.select(exp.Star(except_=[exp.column(GENERATED)]), *_outputs(node, flatten)).from_(inner.subquery())
        replacement = outer.subquery(alias=table.alias if table is not None and table.alias else None)
        (table if table is not None else node).replace(replacement)
    return notes


def _needs_a_prompt_column(spelling: str, source: exp.Expression, where: dict) -> None:
    """BigQuery reads each input row's `prompt` column. A query written as the input that has
    none (and no `*` that might bring one) is said here, at the call — DuckDB would say
    'Referenced column "prompt" not found' with no position. (A TABLE's columns are DuckDB's to
    check when the query runs.)"""
    query = source.this if isinstance(source, exp.Subquery) else None
    if not isinstance(query, exp.Select) or any(isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star)) for e in query.expressions):
        return
    names = [e.alias_or_name for e in query.expressions]
    if "prompt" not in {n.lower() for n in names}:
        raise BindError(
            f"{spelling}: its input query has no column named prompt (it has {', '.join(names[:5])}{', ...' if len(names) > 5 else ''})",
            **where,
            hint="name the text to send: SELECT ..., CONCAT(...) AS prompt FROM ...",
        )


def _position(node: exp.Expression, table: exp.Table | None, at) -> dict:
    """Where the call is written: its name's position (the Table node sqlglot wraps it in)."""
    for candidate in (table, table and table.args.get("db"), node):
        if candidate is not None:
            position = at(candidate)
            if position.get("line"):
                return position
    return {}


def _settings(spelling: str, struct, position: dict) -> dict[str, exp.Expression]:
    """The STRUCT of settings by name; none written (sqlglot keeps False there) is no setting."""
    if not isinstance(struct, exp.Expression):
        return {}
    if not isinstance(struct, exp.Struct):
        raise BindError(f"{spelling}: settings must be written as STRUCT(value AS name, ...), got {struct.sql(dialect='bigquery')[:40]}", **position)
    out = {}
    for item in struct.expressions:
        if isinstance(item, (exp.PropertyEQ, exp.Kwarg)):
            out[item.this.name.lower()] = item.expression
        elif isinstance(item, exp.Alias):
            out[item.alias.lower()] = item.this
        else:
            raise BindError(f"{spelling}: settings must be written as STRUCT(value AS name, ...)", **position)
    return out


def _outputs(node: exp.Expression, flatten: exp.Expression | None) -> list[exp.Expression]:
    generated = exp.column(GENERATED)
    if isinstance(node, exp.GenerateTable):
        return [exp.Dot(this=generated.copy(), expression=exp.Star()), exp.alias_(exp.Anonymous(this="to_json", expressions=[generated.copy()]), "full_response"), exp.alias_(exp.Literal.string(""), "status")]
    flat = arguments.constant_value(flatten) if flatten is not None else False
    if flat is True:
        result = exp.alias_(generated, "ml_generate_text_llm_result")
    else:  # the Gemini response's shape, so JSON paths written for BigQuery read the text
        text = exp.Anonymous(this="json_object", expressions=[exp.Literal.string("text"), generated])
        parts = exp.Anonymous(this="json_object", expressions=[exp.Literal.string("parts"), exp.Anonymous(this="json_array", expressions=[text]), exp.Literal.string("role"), exp.Literal.string("model")])
        candidate = exp.Anonymous(this="json_object", expressions=[exp.Literal.string("content"), parts])
        result = exp.alias_(exp.Anonymous(this="json_object", expressions=[exp.Literal.string("candidates"), exp.Anonymous(this="json_array", expressions=[candidate])]), "ml_generate_text_result")
    return [result, exp.alias_(exp.Literal.string(""), "ml_generate_text_status")]
