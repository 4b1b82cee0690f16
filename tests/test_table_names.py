"""Tables named as the vendors name them (aisql.table_names): a query copied from BigQuery or
Snowflake, naming `project.dataset.table` or `DB.SCHEMA.TABLE`, runs against a local file given
under that name — from `--table` and from the Python API — and a name DuckDB cannot give a table
is one line naming it (issue 60, item 4)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from click.testing import CliRunner

import aisql
from aisql.cli import main
from aisql.table_names import name_parts


@pytest.mark.parametrize(
    "name, parts",
    [
        ("emails", ["emails"]),
        ("support.emails", ["support", "emails"]),
        ("acme-prod.support.emails", ["acme-prod", "support", "emails"]),
        ("`acme-prod.support.emails`", ["acme-prod", "support", "emails"]),
        ("`acme-prod`.support.emails", ["acme-prod", "support", "emails"]),
        ('"my db".main."e.mails"', ["my db", "main", "e.mails"]),
    ],
)
def test_names_split_as_the_vendors_write_them(name, parts):
    assert name_parts(name) == parts


@pytest.mark.parametrize("name, message", [("a..b", "not a name"), ("a.b.c.d", "not a name"), ('"a.b', "unclosed"), (" ", "not a name")])
def test_a_name_duckdb_cannot_give_a_table_is_one_line(name, message):
    with pytest.raises(aisql.AisqlError, match=message):
        name_parts(name)


@pytest.fixture
def emails(tmp_path):
    path = tmp_path / "emails.csv"
    path.write_text("id,body\n1,hello there\n2,please cancel my order\n3,where is my parcel\n")
    return path


def test_a_bigquery_query_runs_unchanged_on_a_file_given_its_name(make_connection, emails):
    con = make_connection()
    con.register("acme-prod.support.emails", str(emails))
    sql = "SELECT e.id, AI.IF(PROMPT('Does this ask to cancel? {e.body}')) AS c FROM `acme-prod.support.emails` AS e ORDER BY e.id"
    planned = con.run(sql, dialect="bigquery")
    assert [r["id"] for r in planned.table.to_pylist()] == [1, 2, 3]
    assert planned.table == con.run(sql, dialect="bigquery", naive=True).table


def test_snowflake_and_two_part_names_and_arrow_data(make_connection, emails):
    con = make_connection()
    con.register("ACME.SUPPORT.TICKETS", pa.table({"id": [1, 2], "body": ["a", "b"]}))
    assert con.run("SELECT count(*) AS n FROM acme.support.tickets", dialect="snowflake").table.to_pylist() == [{"n": 2}]
    con.register("support.emails", str(emails))
    assert con.run("SELECT count(*) AS n FROM support.emails").table.to_pylist() == [{"n": 3}]


def test_the_cli_takes_a_qualified_table(tmp_path, emails, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        main,
        ["run", "--model", "tiny", "--no-cache", "--dialect", "bigquery", "--format", "csv", "--table", f"acme-prod.support.emails={emails}",
         "-e", "SELECT count(*) AS n FROM `acme-prod.support.emails`"],
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines() == ["n", "3"]
    bad = CliRunner().invoke(main, ["run", "--model", "tiny", "--no-cache", "--table", f"a..b={emails}", "-e", "SELECT 1"])
    assert bad.exit_code == 1 and "Traceback" not in bad.output and "table name 'a..b'" in bad.stderr
