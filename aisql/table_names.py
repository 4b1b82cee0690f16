"""Tables named as the vendors name them: `project.dataset.table` (BigQuery), `db.schema.table`
(Snowflake), `schema.table` — quoted or not — so a query copied from a warehouse runs unchanged
against local files (`--table acme-prod.support.emails=emails.csv`).

DuckDB reads a three-part name as catalog.schema.table and a two-part one as catalog.table (or
schema.table): a qualified name's view is created in an in-memory catalog of that name, attached
for this connection (a read-only `--db` is never written), with the schema the name gives.
"""

from __future__ import annotations

import duckdb

from aisql.errors import AisqlError

QUOTES = {'"': '"', "`": "`"}


def name_parts(name: str) -> list[str]:
    """`a.b.c`, `"a.b".c`, `` `acme-prod.support.emails` `` -> its parts; one clear error for a
    name that is empty, has an empty part or more than three, or an unclosed quote."""
    parts, current, quote, quoted = [], "", None, False
    for char in name.strip():
        if quote is not None:
            if char == QUOTES[quote]:
                quote = None
            else:
                current += char
        elif char in QUOTES:
            quote, quoted = char, True
        elif char == ".":
            parts.append(current)
            current = ""
        else:
            current += char
    if quote is not None:
        raise AisqlError(f"table name {name!r} has an unclosed {quote}", hint="e.g. acme-prod.support.emails or \"my db\".main.emails")
    parts.append(current)
    if quoted and len(parts) == 1 and "." in parts[0] and name.strip().startswith("`"):
        parts = parts[0].split(".")  # BigQuery's `project.dataset.table`: one quoted name, three parts
    parts = [p.strip() for p in parts]
    if not all(parts) or len(parts) > 3:
        raise AisqlError(
            f"table name {name!r} is not a name DuckDB can give a table",
            hint="a name, schema.table, or catalog.schema.table (project.dataset.table, db.schema.table)",
        )
    return parts


def quoted(parts: list[str]) -> str:
    return ".".join('"' + p.replace('"', '""') + '"' for p in parts)


def qualified_target(con: duckdb.DuckDBPyConnection, parts: list[str]) -> str:
    """Where a qualified name's view goes (catalog and schema made as needed), quoted."""
    catalog, schema, table = (parts[0], "main", parts[1]) if len(parts) == 2 else parts
    known = {row[0].lower() for row in con.execute("SELECT database_name FROM duckdb_databases()").fetchall()}
    if catalog.lower() not in known:
        con.execute(f"ATTACH ':memory:' AS {quoted([catalog])}")
    try:
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted([catalog, schema])}")
    except duckdb.Error as err:
        raise AisqlError(f"cannot make {'.'.join(parts)} here: {str(err).splitlines()[0]}", hint="the catalog is a database opened read-only; name the table otherwise") from None
    return quoted([catalog, schema, table])
