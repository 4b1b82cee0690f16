"""Results and plans where data people read them: a notebook executed headlessly (nbclient, the
project's own kernel) renders a QueryResult as an HTML table with its summary and quality lines,
and explain as the plan tree; the explain picture (`aisql explain --format svg`) is opened in a
headless browser and must draw something."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SETUP = """
import aisql
from aisql.executor.report.signals import warnings_of
con = aisql.connect(model="tiny", cache=False)
con.duckdb.execute("CREATE TABLE reviews AS SELECT i AS id, 'review number ' || i::VARCHAR || ' <b>bold?</b>' AS body FROM range(30) t(i)")
"""
RUN = "result = con.run(\"SELECT id, body, AI.IF(PROMPT('Is this review positive? {0}', body)) AS positive FROM reviews ORDER BY id\")\nresult"
EXPLAIN = "con.explain(\"SELECT id FROM reviews WHERE AI.IF(PROMPT('Is this review positive? {0}', body))\")"


@pytest.mark.slow
def test_a_notebook_renders_the_result_and_the_plan(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(SETUP), nbformat.v4.new_code_cell(RUN), nbformat.v4.new_code_cell("len(warnings_of(result.stats))"), nbformat.v4.new_code_cell(EXPLAIN)]
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    result_html = _output(notebook.cells[1], "text/html")
    assert result_html.count("<tr>") == 2 + 20  # the header, the types, the first 20 of 30 rows
    assert "10 more rows" in result_html and "&lt;b&gt;bold?&lt;/b&gt;" in result_html  # values escaped, never markup
    assert 'class="aisql-summary"' in result_html and "30 rows" in result_html
    assert "Yes for" in result_html  # AI.IF's quality line
    warnings = int(_output(notebook.cells[2], "text/plain"))
    assert result_html.count('class="aisql-warning"') == warnings
    plan = _output(notebook.cells[3], "text/html")
    assert "ai_1" in plan and "prompts" in plan.replace("&#160;", " ")


def _output(cell, mime: str) -> str:
    for output in cell.outputs:
        if output.get("output_type") == "execute_result" and mime in output.get("data", {}):
            return output["data"][mime]
    raise AssertionError(f"no {mime} output in {cell.source!r}: {cell.outputs}")


def test_the_explain_picture_opens_in_a_headless_browser(tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        pytest.skip("no headless browser (chromium) on this machine: .ci/run installs Debian's")
    svg = tmp_path / "plan.svg"
    query = "SELECT id FROM reviews WHERE AI.IF(PROMPT('Is this review positive? {0}', body))"
    made = subprocess.run(
        [sys.executable, "-m", "aisql", "explain", "--model", "tiny", "--format", "svg", "--table", "reviews=" + str(_reviews(tmp_path)), "-e", query],
        capture_output=True, text=True, cwd=tmp_path, check=False,
    )
    assert made.returncode == 0, made.stderr
    svg.write_text(made.stdout)
    shot = tmp_path / "plan.png"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1400,500"]
    subprocess.run([browser, *flags, f"--screenshot={shot}", svg.as_uri()], capture_output=True, check=False, timeout=120)
    assert shot.exists(), "the browser wrote no screenshot"
    from matplotlib.image import imread

    pixels = imread(str(shot))
    assert pixels.std() > 0.02  # text drawn on the terminal's background, not a blank page
    dom = subprocess.run([browser, *flags, "--dump-dom", svg.as_uri()], capture_output=True, text=True, check=False, timeout=120).stdout
    assert "<svg" in dom and "ai_1" in dom


def _reviews(tmp_path: Path) -> Path:
    path = tmp_path / "reviews.csv"
    path.write_text("id,body\n" + "".join(f"{i},review number {i}\n" for i in range(30)))
    return path
