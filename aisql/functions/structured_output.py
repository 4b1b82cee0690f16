"""Structured output: a declared schema becomes a JSON schema the decoder is held to
(aisql.engine.decoding.json_constraint) and a DuckDB STRUCT the answer is read into.

BigQuery declares it as `output_schema => 'name STRING, age INT64'` (AI.GENERATE); Snowflake's
AI_EXTRACT as questions, each a STRING field (an ARRAY of STRING where the question starts with
"List:"). Supported field types: STRING, INT64, FLOAT64, BOOL, ARRAY of them, and STRUCT of
any of these (BigQuery's `address STRUCT<city STRING, zip STRING>`); every field is nullable (the
text does not say, or the token budget ended before the field).

A STRUCT field is decoded as its leaves, named by their path (`address.city`), in one flat JSON
object — the document the constrained decoder keeps short and always parseable — and read back
into the nested STRUCT the schema declares. (BigQuery field names hold no dots, so a path is
never a name.)
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from sqlglot import exp

from aisql.engine.decoding.json_document import Field
from aisql.errors import BindError

_KINDS = {
    exp.DataType.Type.TEXT: "string",
    exp.DataType.Type.VARCHAR: "string",
    exp.DataType.Type.CHAR: "string",
    exp.DataType.Type.BIGINT: "integer",
    exp.DataType.Type.INT: "integer",
    exp.DataType.Type.SMALLINT: "integer",
    exp.DataType.Type.DOUBLE: "number",
    exp.DataType.Type.FLOAT: "number",
    exp.DataType.Type.BOOLEAN: "boolean",
}
_SQL = {"string": "VARCHAR", "integer": "BIGINT", "number": "DOUBLE", "boolean": "BOOLEAN"}
_WORDS = {"string": "text", "integer": "a whole number", "number": "a number", "boolean": "true or false"}
MAX_FIELDS = 100


def parse_output_schema(spelling: str, text: str) -> tuple[Field, ...]:
    """BigQuery's `output_schema` string: 'name STRING, year INT64, tags ARRAY<STRING>'."""
    if not text.strip():
        raise BindError(f"{spelling}: output_schema is empty", hint="e.g. output_schema => 'name STRING, year INT64'")
    try:
        struct = exp.DataType.build(f"STRUCT<{text}>", dialect="bigquery")
    except Exception as err:  # sqlglot's ParseError and friends
        raise BindError(
            f"{spelling}: output_schema {text!r} is not a list of 'name TYPE' fields ({str(err).splitlines()[0]})",
            hint="e.g. output_schema => 'name STRING, year INT64'",
        ) from None
    if not struct.expressions:
        raise BindError(f"{spelling}: output_schema {text!r} is not a list of 'name TYPE' fields", hint="e.g. output_schema => 'name STRING, year INT64'")
    fields = _fields(spelling, struct.expressions, "")
    _check_all_read(spelling, text, struct.expressions)
    return check_fields(spelling, fields)


def _fields(spelling: str, columns: Sequence[exp.Expression], prefix: str) -> list[Field]:
    """The leaves of a STRUCT's fields, each named by its path from the top."""
    fields = []
    for column in columns:
        kind = column.args.get("kind") if isinstance(column, exp.ColumnDef) else None
        if kind is None:
            raise BindError(f"{spelling}: output_schema field {column.sql()!r} has no type", hint="e.g. 'name STRING'")
        if "." in column.name:
            raise BindError(f"{spelling}: output_schema field name {column.name!r} holds a dot", hint="name a nested field inside a STRUCT<...>")
        if kind.this == exp.DataType.Type.STRUCT:
            if not kind.expressions:
                raise BindError(f"{spelling}: output_schema field {column.name!r} is a STRUCT with no field")
            fields += _fields(spelling, kind.expressions, f"{prefix}{column.name}.")
        else:
            fields.append(_field(spelling, prefix + column.name, kind))
    return fields


def _check_all_read(spelling: str, text: str, columns: Sequence[exp.Expression]) -> None:
    """sqlglot stops a STRUCT's field list at the first thing it cannot read and drops the rest
    ('a STRING b INT64' is one field): compare the text's tokens with those of what was read."""
    import sqlglot

    bigquery = sqlglot.Dialect.get_or_raise("bigquery")
    given = [t for t in bigquery.tokenize(text) if t.text]
    read = [t for t in bigquery.tokenize(", ".join(c.sql(dialect="bigquery") for c in columns)) if t.text]
    if len(given) == len(read):
        return
    at = next((i for i, (a, b) in enumerate(zip(given, read)) if a.text.upper() != b.text.upper()), len(read))
    if at < len(given) - 1 and given[at].text == ",":
        at += 1  # name what follows the comma
    stray = given[at] if at < len(given) else given[-1]
    last = columns[-1].sql(dialect="bigquery") if columns else ""
    raise BindError(
        f"{spelling}: output_schema {text!r}: unexpected {stray.text!r} at character {stray.start + 1}"
        + (f" after field '{last}'" if last else ""),
        hint="fields are 'name TYPE' separated by commas, e.g. 'name STRING, year INT64'",
    )


def _field(spelling: str, name: str, kind: exp.DataType) -> Field:
    array = kind.this == exp.DataType.Type.ARRAY
    inner = kind.expressions[0] if array and kind.expressions else kind
    base = _KINDS.get(inner.this) if isinstance(inner, exp.DataType) else None
    if base is None:
        raise BindError(
            f"{spelling}: output_schema field {name!r} has type {kind.sql(dialect='bigquery')}, which aisql cannot decode",
            hint="use STRING, INT64, FLOAT64, BOOL or an ARRAY of one of them",
        )
    return Field(name, base, array)


def check_fields(spelling: str, fields: Sequence[Field]) -> tuple[Field, ...]:
    seen = set()
    for field in fields:
        if not field.name.strip():
            raise BindError(f"{spelling}: a field name is empty")
        if field.name.lower() in seen:
            raise BindError(f"{spelling}: field {field.name!r} appears twice")
        seen.add(field.name.lower())
    for field in fields:  # `a STRING, a STRUCT<x STRING>`: one name for a value and a STRUCT
        parts = field.name.lower().split(".")
        clash = next((".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in seen), None)
        if clash is not None:
            raise BindError(f"{spelling}: field {clash!r} appears twice")
    if not fields:
        raise BindError(f"{spelling}: the schema has no field")
    if len(fields) > MAX_FIELDS:
        raise BindError(f"{spelling}: at most {MAX_FIELDS} fields, got {len(fields)}")
    return tuple(fields)


def struct_types(fields: Sequence[Field]) -> tuple[str, Any]:
    """(DuckDB STRUCT type, Arrow struct type) of the fields, nested as their paths say."""
    import pyarrow as pa

    arrow_base = {"string": pa.string(), "integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_()}

    def types(tree: dict) -> tuple[str, Any]:
        sql, arrow = [], []
        for name, node in tree.items():
            if isinstance(node, dict):
                inner_sql, inner_arrow = types(node)
            else:
                inner_sql = f"{_SQL[node.kind]}{'[]' if node.array else ''}"
                inner_arrow = pa.list_(arrow_base[node.kind]) if node.array else arrow_base[node.kind]
            sql.append(f'"{name.replace(chr(34), chr(34) * 2)}" {inner_sql}')
            arrow.append((name, inner_arrow))
        return f"STRUCT({', '.join(sql)})", pa.struct(arrow)

    return types(_tree(fields))


def _tree(fields: Sequence[Field]) -> dict:
    """The fields nested by their paths: name -> a field, or name -> the fields below it."""
    tree: dict = {}
    for field in fields:
        *parents, leaf = field.name.split(".")
        node = tree
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = field
    return tree


def _nested(tree: dict, value_of) -> dict:
    return {name: _nested(node, value_of) if isinstance(node, dict) else value_of(node) for name, node in tree.items()}


def describe_fields(fields: Sequence[Field]) -> str:
    """The fields as the prompt names them: `name (text), year (a whole number)`."""
    return ", ".join(f"{f.name} ({'a list of ' if f.array else ''}{_WORDS[f.kind]})" for f in fields)


def value_from_json(fields: Sequence[Field], text: str) -> dict | None:
    """The STRUCT value of a decoded document (NULL if it is not one: a guard — the decoder
    only emits documents of the schema)."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    return _nested(_tree(fields), lambda f: _typed(f, data.get(f.name)))


def fits(fields: Sequence[Field], value: Any) -> bool:
    """Whether `value` is a STRUCT value `value_from_json` can return for these fields."""
    return _fits(_tree(fields), value)


def _fits(tree: dict, value: Any) -> bool:
    if not isinstance(value, dict) or list(value) != list(tree):
        return False
    for name, node in tree.items():
        item = value[name]
        if isinstance(node, dict):
            if not _fits(node, item):
                return False
            continue
        typed = _typed(node, item)
        if typed != item or (item is not None and typed is None) or isinstance(item, bool) != isinstance(typed, bool):
            return False
    return True


def _typed(field: Field, value: Any) -> Any:
    if value is None:
        return None
    if field.array:
        return [_scalar(field.kind, v) for v in value] if isinstance(value, list) else None
    return _scalar(field.kind, value)


def _scalar(kind: str, value: Any) -> Any:
    if kind == "integer":
        return value if isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63 else None
    if kind == "number":
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if kind == "boolean":
        return value if isinstance(value, bool) else None
    return value if isinstance(value, str) else None
