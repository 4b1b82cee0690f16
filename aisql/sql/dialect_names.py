"""The dialects a script may be written in, by name: read by every door that takes --dialect
without importing the parser (aisql.sql.dialects)."""

DEFAULT = "duckdb"
DIALECTS = ("duckdb", "bigquery", "snowflake")
