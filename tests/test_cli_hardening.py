"""The CLI and Python API with careless input: read-only warehouses, output paths checked before
any work, results kept when writing statistics fails, stale temporary files removed, an
unwritable cache dir, servers that are not OpenAI servers — each one clear line, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from conftest import EXAMPLES

import aisql
from aisql.errors import AisqlError, ModelError
from tests.test_cli import run_cli

QUERY = "SELECT name FROM customers WHERE id <= 3 AND AI.IF(PROMPT('{profile} likes tea')) ORDER BY name"


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    path = tmp_path / "warehouse.duckdb"
    con = duckdb.connect(str(path))
    con.execute(f"CREATE TABLE customers AS SELECT * FROM read_csv_auto('{EXAMPLES / 'data' / 'customers.csv'}')")
    con.close()
    return path


def test_a_read_only_warehouse_file_can_be_queried(warehouse):
    os.chmod(warehouse, 0o444)
    try:
        result = run_cli("run", "-e", QUERY, "--db", str(warehouse), "--model", "tiny", "--format", "json", "-q")
        assert result.exit_code == 0, result.output
        assert len(json.loads(result.stdout)) <= 3
    finally:
        os.chmod(warehouse, 0o644)


@pytest.mark.slow
def test_two_readers_of_one_database_do_not_conflict(warehouse, tiny_engine):
    command = [sys.executable, "-m", "aisql.cli", "run", "-e", QUERY, "--db", str(warehouse), "--model", "tiny", "--no-cache", "-q", "--format", "csv"]
    jobs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [job.communicate(timeout=300) for job in jobs]
    assert [job.returncode for job in jobs] == [0, 0], [err for _, err in outputs]
    assert outputs[0][0] == outputs[1][0]


def test_writing_statements_open_the_database_for_writing(warehouse):
    result = run_cli("run", "-e", "CREATE TABLE t AS SELECT 1 AS x; SELECT x FROM t", "--db", str(warehouse), "--format", "json", "-q")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [{"x": 1}]


def test_a_select_that_advances_a_sequence_opens_for_writing(warehouse):
    """`SELECT nextval('s')` writes (the sequence moves): it was judged read-only and refused,
    with no way to open the file read-write. Now it is detected, and --read-write forces it."""
    con = duckdb.connect(str(warehouse))
    con.execute("CREATE SEQUENCE ids")
    con.close()
    first = run_cli("run", "-e", "SELECT nextval('ids') AS n", "--db", str(warehouse), "--format", "json", "-q")
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout) == [{"n": 1}]
    forced = run_cli("run", "-e", "SELECT currval('ids') AS n", "--db", str(warehouse), "--read-write", "--format", "json", "-q")
    assert forced.exit_code == 0, forced.output
    refused = run_cli("run", "-e", "CREATE TABLE t AS SELECT 1 AS x", "--db", str(warehouse), "--read-only", "-q")
    assert refused.exit_code == 1 and "run with --read-write" in refused.stderr


def test_python_api_read_only(warehouse, tiny_engine):
    con = aisql.connect(str(warehouse), read_only=True, engine=tiny_engine, cache=False)
    assert con.sql("SELECT count(*) FROM customers").fetchall()[0][0] == 40
    with pytest.raises(duckdb.Error):
        con.duckdb.execute("CREATE TABLE x AS SELECT 1")
    con.close()
    with pytest.raises(AisqlError, match="read_only needs a database file"):
        aisql.connect(read_only=True)


def test_the_result_is_printed_even_if_writing_statistics_fails(monkeypatch, tmp_path):
    import aisql.output

    def broken(path, text):
        raise AisqlError(f"cannot write {path}: disk full")

    monkeypatch.setattr(aisql.output, "write_text_atomically", broken)
    result = run_cli("run", "-e", "SELECT 42 AS answer", "--format", "csv", "--stats-json", str(tmp_path / "s.json"))
    assert result.exit_code == 1
    assert "42" in result.stdout and "disk full" in result.stderr


def test_stale_temporary_files_of_killed_writes_are_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    stale = tmp_path / f".out.parquet.{dead}.tmp"
    stale.write_text("half a file")
    mine = tmp_path / f".out.parquet.{os.getppid()}.tmp"  # a write in progress (a live process): kept
    mine.write_text("in progress")
    result = run_cli("run", "-e", "SELECT 1 AS x", "--output", str(tmp_path / "out.parquet"))
    assert result.exit_code == 0, result.output
    assert not stale.exists() and mine.exists()
    mine.unlink()


@pytest.mark.slow
def test_an_unwritable_cache_dir_is_one_error(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the cache dir's parent should be")  # unwritable, even for root
    env = {**os.environ, "AISQL_CACHE_DIR": str(blocker / "cache")}
    result = subprocess.run(
        [sys.executable, "-m", "aisql.cli", "run", "-e", "SELECT AI.IF('x') AS a", "--model", "tiny", "--no-cache"],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("error:") and "cannot build the tiny model" in result.stderr


class _NotOpenAI:
    """A loopback server answering HTML, or JSON with no choices."""

    def __init__(self, mode: str) -> None:
        import http.server
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def _send(self, body: bytes, kind: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):  # noqa: N802 - the http.server interface
                if mode == "html":
                    return self._send(b"<html>a login page</html>", "text/html")
                body = {"object": "list", "data": [{"id": "tiny", "object": "model", "created": 0, "owned_by": "x"}]}
                self._send(json.dumps(body).encode(), "application/json")

            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers["Content-Length"]))
                body = {"id": "x", "object": "text_completion", "created": 0, "model": "tiny", "choices": []}
                self._send(json.dumps(body).encode() if mode == "empty" else b"<html>oops</html>", "application/json")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"


@pytest.mark.parametrize(("mode", "message"), [("html", "did not answer /models"), ("empty", "did not answer /completions")])
def test_a_server_that_is_not_openai_compatible_is_one_error(mode, message):
    fake = _NotOpenAI(mode)
    try:
        con = aisql.connect(model=f"openai:tiny@{fake.url}", cache=False)
        with pytest.raises(ModelError, match=message):
            con.run("SELECT AI.IF('x') AS a")
    finally:
        fake.server.shutdown()


@pytest.mark.parametrize("options", [["--price-per-hour", "nan", "--max-cost", "1e-6"], ["--max-cost", "nan"], ["--price-per-hour", "inf"]])
def test_nan_and_infinite_prices_are_refused_before_any_prompt(options, tiny_engine):
    """nan compares false with every limit (`--price-per-hour nan --max-cost 1e-6` ran the whole
    query); `--max-cost nan` was an internal error; `--price-per-hour inf` was refused only after
    32 prompts ran."""
    from click.testing import CliRunner

    from aisql.cli import main

    passes = tiny_engine.stats.forward_passes
    done = CliRunner().invoke(main, ["run", "--model", "tiny", "--no-cache", "-e", "SELECT AI.IF('x')"] + options)
    assert done.exit_code != 0 and "is not a finite number" in done.output
    con = aisql.Connection(engine=tiny_engine, cache=False)
    settings = dict(zip([o.lstrip("-").replace("-", "_") for o in options[::2]], [float(v) for v in options[1::2]]))
    with pytest.raises(aisql.AisqlError, match="must be a finite number"):
        con.run("SELECT AI.IF('x')", **settings)
    assert tiny_engine.stats.forward_passes == passes
