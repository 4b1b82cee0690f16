"""Planner fixtures in sqlglot's style: each case in tests/fixtures/planner/*.sql is a query, the
final SQL DuckDB runs, and the input SQL of each AI node, all normalised by sqlglot. Planned
without statistics (the written order), so the expected SQL depends on the rules alone.

    -- case: a name
    <query>;
    -- final
    <final SQL>;
    -- input ai_1
    <input SQL of node ai_1, or NONE when the node streams>;

`python tests/test_planner_fixtures.py --write` rewrites the expected parts from the current
planner (then read the diff before committing it).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import sqlglot

from aisql.planner import plan_statement
from aisql.sql import SourceText, bind_statement, parse_script

FIXTURES = Path(__file__).parent / "fixtures" / "planner"
PREFIX = "__f_"


def normalise(sql: str) -> str:
    if sql.strip().upper() == "NONE":
        return "NONE"
    return sqlglot.parse_one(sql, read="duckdb").sql(dialect="duckdb")


def parse_cases(text: str) -> list[dict]:
    cases = []
    for block in re.split(r"^-- case: ", text, flags=re.M)[1:]:
        name, _, body = block.partition("\n")
        parts = re.split(r"^-- (final|input \w+)\s*$", body, flags=re.M)
        case = {"name": name.strip(), "query": parts[0].strip().rstrip(";"), "expect": {}}
        for label, sql in zip(parts[1::2], parts[2::2]):
            case["expect"][label] = sql.strip().rstrip(";")
        cases.append(case)
    return cases


def planned(query: str) -> dict[str, str]:
    source = SourceText(query)
    (statement,) = parse_script(source)
    plan = plan_statement(bind_statement(statement, source, PREFIX))
    out = {"final": plan.final_sql}
    for node in plan.nodes:
        out[f"input {node.id}"] = node.input_sql or "NONE"
    return out


CASES = [(path.stem, case) for path in sorted(FIXTURES.glob("*.sql")) for case in parse_cases(path.read_text())]


@pytest.mark.parametrize("case", [c for _, c in CASES], ids=[f"{f}:{c['name']}" for f, c in CASES])
def test_planner_fixture(case):
    got = planned(case["query"])
    assert set(got) == set(case["expect"]), f"nodes differ: {sorted(got)} vs {sorted(case['expect'])}"
    for label, expected in case["expect"].items():
        assert normalise(got[label]) == normalise(expected), label


def _write() -> None:
    for path in sorted(FIXTURES.glob("*.sql")):
        out = []
        for case in parse_cases(path.read_text()):
            out.append(f"-- case: {case['name']}\n{case['query']};\n")
            for label, sql in planned(case["query"]).items():
                out.append(f"-- {label}\n{normalise(sql)};\n")
            out.append("\n")
        path.write_text("".join(out).rstrip() + "\n")


if __name__ == "__main__" and "--write" in sys.argv:
    _write()
