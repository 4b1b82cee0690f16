"""Front end: SQL text -> statements with bound AI calls. Knows SQL, never models.

Its names load on first use, so a door that reads only a list of names (the dialects: the CLI)
does not parse anything to get it."""

from __future__ import annotations

from aisql.lazy import lazy_exports

_LAZY = (  # name -> the module it loads from
    dict.fromkeys(("AICall",), "aisql.sql.calls")
    | dict.fromkeys(("BoundStatement", "bind_statement"), "aisql.sql.bind")
    | dict.fromkeys(("SourceText",), "aisql.sql.source")
    | dict.fromkeys(("Statement", "parse_script"), "aisql.sql.parse")
    | dict.fromkeys(("Template", "parse_template"), "aisql.sql.template")
)
__all__ = sorted(_LAZY)

__getattr__ = lazy_exports("aisql.sql", _LAZY, globals())
