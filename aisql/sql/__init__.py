"""Front end: SQL text -> statements with bound AI calls. Knows SQL, never models.

Its names load on first use, so a door that reads only a list of names (the dialects: the CLI)
does not parse anything to get it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aisql.lazy import lazy_exports

_LAZY = {
    "AICall": "aisql.sql.calls",
    "BoundStatement": "aisql.sql.bind",
    "SourceText": "aisql.sql.source",
    "Statement": "aisql.sql.parse",
    "Template": "aisql.sql.template",
    "bind_statement": "aisql.sql.bind",
    "parse_script": "aisql.sql.parse",
    "parse_template": "aisql.sql.template",
}

if TYPE_CHECKING:  # pragma: no cover
    from aisql.sql.bind import BoundStatement, bind_statement
    from aisql.sql.calls import AICall
    from aisql.sql.parse import Statement, parse_script
    from aisql.sql.source import SourceText
    from aisql.sql.template import Template, parse_template

__all__ = ["AICall", "BoundStatement", "SourceText", "Statement", "Template", "bind_statement", "parse_script", "parse_template"]

__getattr__ = lazy_exports("aisql.sql", _LAZY, globals())
