"""Front end: SQL text -> statements with bound AI calls. Knows SQL, never models."""

from aisql.sql.bind import BoundStatement, bind_statement
from aisql.sql.calls import AICall
from aisql.sql.parse import Statement, parse_script
from aisql.sql.source import SourceText
from aisql.sql.template import Template, parse_template

__all__ = [
    "AICall",
    "BoundStatement",
    "SourceText",
    "Statement",
    "Template",
    "bind_statement",
    "parse_script",
    "parse_template",
]
