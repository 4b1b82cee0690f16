"""The `aisql` command: outputs, explain, and one clear error line (exit 1, no traceback) for bad input."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from conftest import EXAMPLES, ROOT

from aisql.cli import main

HOT_LEADS = str(EXAMPLES / "hot_leads.sql")


def run_cli(*args, cwd: Path = ROOT):
    """`aisql ARGS` in-process; runs skip the result cache unless a test names one (tests that
    count model work must not find answers an earlier test left)."""
    args = list(args)
    if args and args[0] == "run" and "--cache" not in args and "--no-cache" not in args:
        args.append("--no-cache")
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(main, list(args))
    finally:
        os.chdir(old)


def test_run_main_example_prints_table_and_note():
    result = run_cli("run", HOT_LEADS, "--model", "tiny", "--max-rows", "5")
    assert result.exit_code == 0, result.output
    assert "customer" in result.stdout and "product" in result.stdout
    assert "answers are meaningless" in result.stdout  # the note travels with the table
    assert "rows" in result.stderr and "prompts" in result.stderr  # the summary goes to stderr


@pytest.mark.slow
def test_run_from_another_directory_resolves_paths_next_to_the_query(tmp_path):
    result = run_cli("run", HOT_LEADS, "--model", "tiny", "--format", "csv", cwd=tmp_path)
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert rows and set(rows[0]) == {"customer", "product", "price"}
    assert "meaningless" in result.stderr  # CSV data stays clean; the note goes to stderr
    quiet = run_cli("run", HOT_LEADS, "--model", "tiny", "--format", "csv", "-q", cwd=tmp_path)
    assert quiet.stdout == result.stdout and quiet.stderr == ""  # -q: no notes, no summary


@pytest.mark.slow
def test_formats_and_outputs_agree(tmp_path):
    csv_out = run_cli("run", HOT_LEADS, "--model", "tiny", "--format", "csv", "-q")
    json_out = run_cli("run", HOT_LEADS, "--model", "tiny", "--format", "json", "-q")
    assert csv_out.exit_code == json_out.exit_code == 0
    from_csv = list(csv.DictReader(io.StringIO(csv_out.stdout)))
    from_json = json.loads(json_out.stdout)
    assert [r["customer"] for r in from_csv] == [r["customer"] for r in from_json]
    for suffix in ("csv", "parquet", "json"):
        target = tmp_path / f"out.{suffix}"
        result = run_cli("run", HOT_LEADS, "--model", "tiny", "--output", str(target))
        assert result.exit_code == 0, result.output
        assert target.exists() and not list(tmp_path.glob(".*tmp"))
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.num_rows == len(from_json)
    assert b"meaningless" in table.schema.metadata[b"aisql_note"]
    assert len(json.loads((tmp_path / "out.json").read_text())) == len(from_json)
    assert len(list(csv.DictReader(open(tmp_path / "out.csv")))) == len(from_json)


def test_execute_option_with_registered_table_and_naive(tmp_path):
    args = ["-e", "SELECT count(*) AS n FROM c WHERE AI.IF(PROMPT('{profile} likes tea'))", "--table", f"c={EXAMPLES / 'data' / 'customers.csv'}", "--model", "tiny", "--format", "json", "-q"]
    planned = run_cli("run", *args)
    naive = run_cli("run", *args, "--naive")
    assert planned.exit_code == naive.exit_code == 0, planned.output
    assert json.loads(planned.stdout) == json.loads(naive.stdout)


def test_db_file_and_statement_without_ai(tmp_path):
    db = tmp_path / "x.duckdb"
    first = run_cli("run", "--db", str(db), "-e", "CREATE TABLE t AS SELECT 42 AS answer", "-q")
    second = run_cli("run", "--db", str(db), "-e", "SELECT answer FROM t", "--format", "json", "-q")
    assert first.exit_code == second.exit_code == 0, first.output + second.output
    assert json.loads(second.stdout) == [{"answer": 42}]


def test_explain_text_and_json():
    text = run_cli("explain", HOT_LEADS)
    assert text.exit_code == 0, text.output
    assert "AIJoin" in text.stdout and "prompts total: 190" in text.stdout
    data = json.loads(run_cli("explain", HOT_LEADS, "--format", "json").stdout)
    (node,) = data["statements"][0]["ai_nodes"]
    assert node["rows_in"] == node["prompts_total"] == node["prompts_unique"] == 190
    assert node["estimate"] == "exact" and node["type"] == "AIJoin"


def test_explain_marks_upper_bounds_and_unknowns():
    sql = (
        "WITH good AS (SELECT * FROM reviews WHERE AI.IF(review)) "
        "SELECT id FROM good WHERE AI.IF(PROMPT('{review} is long')) AND id < 50 AND AI.IF(PROMPT('{review} is short'))"
    )
    data = json.loads(run_cli("explain", "-e", sql, "--table", f"reviews={EXAMPLES / 'data' / 'reviews.csv'}", "--format", "json").stdout)
    estimates = [n["estimate"] for n in data["statements"][0]["ai_nodes"]]
    assert estimates == ["exact", "unknown", "unknown"]


BAD = [
    (["run", "-e", "SELECT * FROM t WHERE ("], "syntax error", "line 1, column 23"),
    (["run", "-e", "SELECT name\nFROM c WHERE AI.IF(PROMPT('{profil} is nice'))", "--table", "c=examples/data/customers.csv"], "profil", "line 2, column 28"),
    (["run", "-e", "SELECT nme FROM c", "--table", "c=examples/data/customers.csv"], "nme", "line 1, column 8"),
    (["run", "-e", "SELECT * FROM nosuch"], "nosuch", "line 1, column 15"),
    (["run", "-e", "SELECT * FROM 'missing.csv'"], "missing.csv", "line 1"),
    (["run", "-e", "SELECT AI.IF(PROMPT('{a')) FROM range(3)"], "unclosed '{'", "line 1"),
    (["run", "-e", "SELECT AI.CLASSIFY(x, 'a') FROM t"], "labels must be a list", "line 1, column 8"),
    (["run", "-e", "SELECT AI.IF('x') AS y", "--model", "no/such-model-xyz"], "no/such-model-xyz", None),
    (["run", "-e", "SELECT AI.IF('x') AS y", "--model", "bad model!"], "unknown model", None),
    (["run", "missing.sql"], "query file not found", None),
    (["run", "-e", "SELECT 1", "--table", "c=nope.csv"], "file not found", None),
    (["run", "-e", "SELECT 1", "--table", "nonsense"], "NAME=PATH", None),
    (["run", "-e", "SELECT 1", "--output", "out.xlsx"], "output format", None),
    (["run"], "no query", None),
]


@pytest.mark.parametrize("args, message, position", BAD, ids=[b[1] for b in BAD])
def test_bad_input_gives_one_clear_error(args, message, position, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # no network: fail fast
    monkeypatch.setenv("HF_HOME", str(ROOT / ".no-hf-home"))
    result = run_cli(*args)
    assert result.exit_code == 1, result.output
    assert "error:" in result.stderr and message in result.stderr
    if position:
        assert position in result.stderr
    assert "Traceback" not in result.output
    assert result.stdout == ""


def test_debug_shows_the_exception():
    result = run_cli("run", "-e", "SELECT * FROM t WHERE (", "--debug")
    assert result.exit_code != 0 and result.exception is not None
    assert type(result.exception).__name__ == "SqlSyntaxError"


@pytest.mark.slow
def test_console_script_runs_the_example(tmp_path):
    script = Path(sys.executable).with_name("aisql")
    assert script.exists(), "install the project (pip install -e .) to get the aisql command"
    stats = tmp_path / "stats.json"
    done = subprocess.run(
        [str(script), "run", "examples/hot_leads.sql", "--model", "tiny", "--format", "csv", "--stats-json", str(stats)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("customer,product,price")
    assert json.loads(stats.read_text())["prompts_total"] == 190


def test_non_utf8_csv_names_file_and_reason(tmp_path):
    data = tmp_path / "latin1.csv"
    data.write_bytes(b"id,text\n1,caf\xe9\n2,ok\n")
    result = run_cli("run", "-e", f"SELECT AI.IF(text) FROM '{data}'", "--model", "tiny")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert str(data) in result.stderr and "not utf-8 encoded" in result.stderr


def test_plain_file_paths_and_read_parquet_in_from(tmp_path):
    parquet = tmp_path / "customers.parquet"
    converted = run_cli("run", "-e", f"COPY (SELECT * FROM 'examples/data/customers.csv') TO '{parquet}'")
    assert converted.exit_code == 0, converted.output
    sql = "SELECT count(*) AS n FROM {src} WHERE id <= 10 AND AI.IF(PROMPT('{{profile}} likes tea'))"
    from_csv = run_cli("run", "-e", sql.format(src="'examples/data/customers.csv'"), "--model", "tiny", "--format", "json", "-q")
    from_parquet = run_cli("run", "-e", sql.format(src=f"read_parquet('{parquet}')"), "--model", "tiny", "--format", "json", "-q")
    assert from_csv.exit_code == from_parquet.exit_code == 0, from_csv.output + from_parquet.output
    assert json.loads(from_csv.stdout) == json.loads(from_parquet.stdout)


@pytest.mark.slow
def test_engine_options_keep_results_and_report_their_effect(tmp_path):
    base = ["run", HOT_LEADS, "--model", "tiny", "--format", "csv", "-q"]
    default_stats, small_stats, plain_stats = (tmp_path / f"{n}.json" for n in ("default", "small", "plain"))
    default = run_cli(*base, "--stats-json", str(default_stats))
    small = run_cli(*base, "--kv-budget", "64KB", "--stats-json", str(small_stats))
    plain = run_cli(*base, "--no-prefix-cache", "--no-speculation", "--stats-json", str(plain_stats))
    assert default.exit_code == small.exit_code == plain.exit_code == 0, default.output + small.output + plain.output
    assert default.stdout == small.stdout == plain.stdout  # same answers whatever the cache does
    d, s, p = (json.loads(f.read_text()) for f in (default_stats, small_stats, plain_stats))
    assert d["computed_tokens"] < d["logical_tokens"] and d["kv_regret_tokens"] == 0
    assert d["kv_hit_tokens"] > 0 and d["peak_kv_bytes"] > 0
    assert s["peak_kv_bytes"] <= 64_000 and s["computed_tokens"] > d["computed_tokens"]
    assert s["kv_evicted_bytes"] > 0 and s["kv_regret_tokens"] > 0 and d["kv_evicted_bytes"] == 0
    assert p["computed_tokens"] == p["logical_tokens"] and p["kv_hit_tokens"] == 0


def test_quantize_is_said_with_the_output():
    result = run_cli("run", HOT_LEADS, "--model", "tiny", "--quantize", "int8", "--max-rows", "1")
    assert result.exit_code == 0, result.output
    assert "quantized to int8" in result.stdout


@pytest.mark.parametrize("text, size", [("1024", 1024), ("2GB", 2_000_000_000), ("1.5 MiB", 1_572_864), ("64kb", 64_000)])
def test_parse_size(text, size):
    from aisql.sizes import parse_size

    assert parse_size(text) == size


def test_explain_costs_on_a_hardware_profile():
    result = run_cli("explain", HOT_LEADS, "--hardware", "h100", "--price-per-hour", "4", "--format", "json", "--no-cache")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["hardware"]["name"] == "h100" and data["hardware"]["price_per_hour"] == 4
    totals = data["statements"][0]["totals"]
    assert totals["naive"]["tokens"] > totals["plan"]["tokens"] > 0
    assert totals["naive"]["flops"] > totals["plan"]["flops"] > 0
    assert totals["naive"]["usd"] > totals["plan"]["usd"] > 0
    text = run_cli("explain", HOT_LEADS, "--hardware", "h200", "--no-cache")
    assert "tokens naive" in text.stdout and "FLOPs" in text.stdout and "$" in text.stdout
