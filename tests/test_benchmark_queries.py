"""`aisql explain` on every benchmark query: plan and naive costs, as text and as JSON."""

from __future__ import annotations

import json
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
from datagen import tables  # noqa: E402
from run import QUERIES  # noqa: E402


@pytest.fixture(scope="module")
def data():
    return tables(scale=0.25)


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_explain_prints_plan_and_naive_costs(make_connection, data, name):
    con = make_connection()
    for table, arrow in data.items():
        con.duckdb.register(f"__{table}", arrow)
        con.duckdb.execute(f"CREATE OR REPLACE TABLE {table} AS SELECT * FROM __{table}")
    explanation = con.explain(QUERIES[name])
    statement = json.loads(json.dumps(explanation.to_dict()))["statements"][0]
    assert statement["ai_nodes"]
    for node in statement["ai_nodes"]:
        assert node["estimate"] in ("exact", "estimate")
        assert node["naive"]["tokens"] >= node["plan"]["tokens"] > 0
    totals = statement["totals"]
    assert totals["naive"]["tokens"] > totals["plan"]["tokens"] and totals["naive"]["flops"] > totals["plan"]["flops"]
    from rich.console import Console

    console = Console(record=True, width=140)
    console.print(explanation.tree())
    text = console.export_text()
    assert "tokens naive" in text and "→ plan" in text
