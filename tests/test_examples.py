"""The Python examples run end to end with the tiny model: the ETL job (Parquet in, Parquet out,
resumable through the result cache) and the DuckDB functions on a plain connection."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from tests.conftest import EXAMPLES


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_etl_job_writes_parquet_and_a_rerun_asks_nothing(tmp_path: Path):
    etl = load("etl_job")
    source = tmp_path / "reviews.parquet"
    duckdb.sql(f"COPY (SELECT * FROM read_csv_auto('{EXAMPLES / 'data' / 'reviews.csv'}')) TO '{source}' (FORMAT parquet)")
    output = tmp_path / "out" / "complaints.parquet"
    output.parent.mkdir()
    args = ["--input", str(source), "--output", str(output), "--model", "tiny", "--cache", str(tmp_path / "answers.sqlite")]

    first = etl.main(args)
    table = pq.read_table(output)
    assert table.column_names == ["id", "product_id", "rating", "review", "topic"]
    assert table.num_rows == first["rows_out"]
    assert all(r <= 2 for r in table.column("rating").to_pylist())
    assert set(table.column("topic").to_pylist()) <= {"quality", "size", "delivery", "price", "other"}
    assert first["evaluated"] > 0 and first["from_cache"] == 0

    second = etl.main(args)  # e.g. after a crash: everything committed is reused
    assert second["evaluated"] == 0 and second["from_cache"] == first["evaluated"]
    assert pq.read_table(output).equals(table)


def test_etl_job_demo_input(tmp_path: Path):
    summary = load("etl_job").main(["--output", str(tmp_path / "c.parquet"), "--model", "tiny", "--cache", str(tmp_path / "a.sqlite")])
    assert (tmp_path / "reviews.parquet").exists()
    assert pq.read_table(tmp_path / "c.parquet").num_rows == summary["rows_out"]


def test_notebook_udf_example(tmp_path: Path, capsys):
    results = load("notebook_udf").main(["--model", "tiny", "--cache", str(tmp_path / "answers.sqlite")])
    assert set(results) == {"hikers", "segments", "slogans", "matches"}
    assert len(results["segments"]) == 5 and len(results["slogans"]) == 3
    assert {segment for _, segment in results["segments"]} <= {"student", "professional", "retired"}
    assert all(isinstance(slogan, str) for _, slogan in results["slogans"])
    err = capsys.readouterr().err
    assert "ai_if:" in err and "meaningless" in err


import pytest


@pytest.mark.parametrize(
    "name, column",
    [("complaint_digest", "complaints"), ("review_facts", "facts"), ("review_product_match", "closest_product")],
)
@pytest.mark.slow
def test_operator_examples_run(make_connection, monkeypatch, name, column):
    """The SemBench-style examples of AI_AGG, structured output and similarity run as written."""
    monkeypatch.chdir(EXAMPLES)
    table = make_connection().run((EXAMPLES / f"{name}.sql").read_text()).table
    assert table.num_rows > 0
    assert all(value is not None for value in table.column(column).to_pylist())
