"""The one way `aisql run` and `aisql shell` put a result out (aisql.output.ResultPrinter): the
label of approximate answers goes with the rows wherever they go — under a table, into every
Parquet file, in the shell — and never into CSV/JSON data on stdout."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aisql.executor.query import QueryResult
from aisql.executor.report.run_stats import NodeStats, RunStats
from aisql.executor.session import ModelUsed
from aisql.output import ResultPrinter


def approximate_result() -> QueryResult:
    node = NodeStats(node="ai_1", function="AI.IF(PROMPT('...'))", strategy="prefetch", prompts_total=600)
    node.approximate = {
        "targets": {"recall": 0.9, "precision": 0.9, "delta": 0.05}, "rows": 600, "sample": 200,
        "proxy_answered": 216, "llm_answered": 384, "fallback_to_exact": None, "thresholds": [0.1, 0.9],
        "estimated_recall": 0.95, "estimated_precision": 0.93,
    }
    stats = RunStats(model="tiny", model_note=None, mode="planned", nodes=[node])
    table = pa.table({"id": [1, 2]})
    return QueryResult(table=table, stats=stats, model=ModelUsed("tiny", None, "cpu"), results=[(1, table)])


@pytest.mark.parametrize("interactive", [False, True])
def test_a_table_carries_the_approximate_label(capsys, interactive):
    ResultPrinter("table", interactive=interactive).emit(approximate_result())
    out = capsys.readouterr().out
    assert "APPROXIMATE ai_1: 216 of 600 prompts answered by the proxy" in out


@pytest.mark.parametrize("interactive", [False, True])
def test_csv_and_json_data_stay_clean_and_the_label_goes_to_stderr(capsys, interactive):
    for fmt in ("csv", "json"):
        ResultPrinter(fmt, interactive=interactive).emit(approximate_result())
        captured = capsys.readouterr()
        assert "APPROXIMATE" not in captured.out and "APPROXIMATE" in captured.err
        if fmt == "json":  # valid JSON: one document, or one per line in the shell
            documents = captured.out.splitlines() if interactive else [captured.out]
            assert all(json.loads(d) for d in documents)


def test_every_output_file_carries_the_label(tmp_path):
    printer = ResultPrinter(output=str(tmp_path / "out.parquet"), output_all=str(tmp_path / "all"))
    printer.check_paths()
    printer.emit(approximate_result())
    for path in (tmp_path / "out.parquet", tmp_path / "all" / "statement_1.parquet"):
        metadata = pq.read_schema(path).metadata
        assert b"APPROXIMATE ai_1" in metadata[b"aisql_note"], path


@pytest.mark.parametrize("interactive", [False, True])
def test_json_output_never_holds_nan_or_infinity(capsys, interactive):
    """A FLOAT64 field a random model wrote as 1e999 used to print `Infinity`: not JSON."""
    table = pa.table({"x": [1.5, float("inf"), float("nan")], "l": [[float("-inf")], [], [2.0]]})
    result = approximate_result()
    result = QueryResult(table=table, stats=result.stats, model=result.model, results=[(1, table)])
    ResultPrinter("json", interactive=interactive).emit(result)
    captured = capsys.readouterr()
    documents = captured.out.splitlines() if interactive else [captured.out]
    rows = [json.loads(d, parse_constant=lambda c: pytest.fail(f"{c} in JSON output")) for d in documents]
    flat = rows[0]["rows"] if interactive else rows[0]
    assert flat == [{"x": 1.5, "l": [None]}, {"x": None, "l": []}, {"x": None, "l": [2.0]}]
    assert "3 non-finite number(s)" in captured.err


def test_an_output_json_file_holds_what_format_json_prints(capsys, tmp_path):
    """Was: `--output x.json` written by DuckDB's COPY (one object per line, tabs), `--format json`
    by aisql (an indented array): two renderings of one result."""
    result = approximate_result()
    result.table = pa.table({"id": [1, 2], "tags": [["a"], []], "score": [0.5, None]})
    ResultPrinter("json").emit(result)
    printed = capsys.readouterr().out
    ResultPrinter(output=str(tmp_path / "out.json")).emit(result)
    assert (tmp_path / "out.json").read_text() == printed
