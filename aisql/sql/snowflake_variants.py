"""Snowflake's VARIANT paths on AI results, read as Snowflake reads them.

Snowflake's AI_CLASSIFY returns an OBJECT, `{"labels": ["travel"]}`, and its documentation reads it
as `AI_CLASSIFY(...):labels[0]::string`. aisql returns the bare label (the plain list under
`output_mode 'multi'`), as it does for every function; so a path written on the call is read on
the object Snowflake would have returned: the call becomes `to_json({'labels': [call]})` under the
path. And Snowflake's `x:path::string` is the string itself, not its JSON text: sqlglot writes it
for DuckDB as `CAST(x -> path AS TEXT)` (which keeps the quotes), so it is read as `x ->> path`.
"""

from __future__ import annotations

from sqlglot import exp

from aisql.errors import BindError

_TEXT_TYPES = {exp.DataType.Type.TEXT, exp.DataType.Type.VARCHAR, exp.DataType.Type.CHAR, exp.DataType.Type.NCHAR, exp.DataType.Type.NVARCHAR}


def translate(ast: exp.Expression) -> None:
    """Rewrite `ast` (read as Snowflake SQL) in place; before multi-label calls are rewritten, so
    the call under a path is still the one written."""
    for extract in list(ast.find_all(exp.JSONExtract)):
        if extract.args.get("variant_extract") and _classify_mode(extract.this) is not None:
            call = extract.this
            labels = call.copy() if _classify_mode(call) == "multi" else exp.Array(expressions=[call.copy()])
            as_object = exp.func("to_json", exp.Struct(expressions=[exp.PropertyEQ(this=exp.to_identifier("labels"), expression=labels)]))
            call.replace(as_object)
    for cast in list(ast.find_all(exp.Cast)):
        inner = cast.this
        if isinstance(inner, exp.JSONExtract) and inner.args.get("variant_extract") and cast.to.this in _TEXT_TYPES:
            scalar = exp.JSONExtractScalar(this=inner.this.pop(), expression=inner.expression.pop())
            cast.replace(scalar)


def _classify_mode(node: exp.Expression) -> str | None:
    """'single' or 'multi' where `node` is an AI_CLASSIFY call, else None."""
    from aisql.sql.multi_label import _mode
    from aisql.sql.recognize import match_ai_call

    try:
        raw = match_ai_call(node)
    except BindError:
        return None
    if raw is None or raw.function.name != "CLASSIFY":
        return None
    try:
        mode, _, _ = _mode(dict(raw.named), list(raw.positional))
    except BindError:
        return "single"  # the binder says what is wrong with the options
    return "multi" if mode == "multi" else "single"
