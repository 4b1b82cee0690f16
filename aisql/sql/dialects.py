"""The SQL dialects a script may be written in: DuckDB (the default, what runs), BigQuery and
Snowflake (queries ported verbatim).

Each vendor's dialect is sqlglot's, with one change: a call written `AI.<NAME>(...)` is parsed
as a plain (anonymous) function call, whatever NAME is. sqlglot's BigQuery parser otherwise
reads `AI.IF(` as SQL's IF (three arguments, rendered back as `CASE WHEN`) and gives some
`AI.*` names its own argument layouts; aisql's binder wants the arguments exactly as written
(`aisql.sql.recognize`) — except the table-valued `AI.GENERATE_TEXT(MODEL m, TABLE t, ...)` /
`AI.GENERATE_TABLE(MODEL m, ...)`, which sqlglot reads into its own nodes (aisql.sql.table_functions
rewrites them). Everything relational is then written out in DuckDB's dialect
(`FLOAT64` -> `DOUBLE`, `\"\"\"...\"\"\"` strings, backquoted names), which is what runs.
"""

from __future__ import annotations

from sqlglot.dialects.bigquery import BigQuery
from sqlglot.dialects.dialect import Dialect
from sqlglot.dialects.snowflake import Snowflake
from sqlglot.tokens import TokenType

from aisql.sql import dialect_names
from aisql.sql.dialect_names import DEFAULT


class _AICallsAsWritten:
    """Parser mixin: `AI.<name>(...)` is an anonymous call, its arguments as written."""

    def _parse_function_call(self, functions=None, anonymous=False, optional_parens=True, any_token=False):
        index = self._index
        table_valued = len(self._tokens) > index + 2 and self._tokens[index + 2].text.upper() == "MODEL"  # AI.GENERATE_TEXT(MODEL m, ...)
        if index >= 2 and self._tokens[index - 1].token_type == TokenType.DOT and self._tokens[index - 2].text.upper() == "AI" and not table_valued:
            anonymous = True
        return super()._parse_function_call(functions, anonymous, optional_parens, any_token)


class AisqlBigQuery(BigQuery):
    class Parser(_AICallsAsWritten, BigQuery.Parser):
        pass


class AisqlSnowflake(Snowflake):
    class Parser(_AICallsAsWritten, Snowflake.Parser):
        pass


DIALECTS: dict[str, type[Dialect] | str] = dict(zip(dialect_names.DIALECTS, ("duckdb", AisqlBigQuery, AisqlSnowflake)))  # by name, in the names' order


def dialect_for(name: str | None):
    """The sqlglot dialect to read a script written in `name` (None: DuckDB's)."""
    key = (name or DEFAULT).lower()
    if key not in DIALECTS:
        from aisql.errors import AisqlError

        raise AisqlError(f"unknown SQL dialect {name!r}", hint=f"use one of: {', '.join(DIALECTS)}")
    return DIALECTS[key]
