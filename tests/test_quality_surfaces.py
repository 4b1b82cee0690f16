"""A node's quality lines (aisql.executor.report.signals) reach every surface: the CLI's summary (also
with --quiet, for warnings), the shell, Python's warnings (tests/test_decisions.py) and dbt's
end-of-run lines."""

from __future__ import annotations

import atexit
import io
from contextlib import redirect_stderr

import pytest
from click.testing import CliRunner

from aisql.cli import main
from aisql.executor.report import signals
from aisql.executor.report.run_stats import NodeStats

# 40 distinct prompts; with ONE_SIDED_SHARE at 0.5 every node is "one-sided" whatever the random model says
QUERY = "SELECT i, AI.IF(PROMPT('Is {0} a prime number?', i)) AS prime FROM range(40) t(i)"


@pytest.fixture
def always_one_sided(monkeypatch):
    monkeypatch.setattr(signals, "ONE_SIDED_SHARE", 0.5)


def test_the_cli_summary_says_it_and_quiet_keeps_the_warning(always_one_sided):
    done = CliRunner().invoke(main, ["run", "-e", QUERY, "--model", "tiny", "--no-cache"])
    assert done.exit_code == 0, done.output
    assert "Yes for" in done.stderr and "warning: ai_1's answers carry little signal" in done.stderr
    quiet = CliRunner().invoke(main, ["run", "-e", QUERY, "--model", "tiny", "--no-cache", "-q"])
    assert quiet.exit_code == 0, quiet.output
    assert "carry little signal" in quiet.stderr and "Yes for" not in quiet.stderr  # the summary is silenced, not the warning


def test_the_cli_says_what_examples_did():
    examples = "[{'i': 2, 'label': TRUE}, {'i': 4, 'label': FALSE}, {'i': 3, 'label': TRUE}, {'i': 9, 'label': FALSE}]"
    query = f"SELECT i, AI.IF(PROMPT('Is {{i}} a prime number?'), examples => {examples}) AS prime FROM range(40) t(i)"
    done = CliRunner().invoke(main, ["run", "-e", query, "--model", "tiny", "--no-cache"])
    assert done.exit_code == 0, done.output
    assert "answers under labels from 4 labelled examples (2 false, 2 true)" in done.stderr
    assert "(held out one at a time)" in done.stderr and "balanced accuracy" in done.stderr
    assert "(2-fold cross-validated)" in done.stderr  # the probe on the hidden state, beside the other rules


def test_the_shell_says_it(always_one_sided):
    done = CliRunner().invoke(main, ["shell", "--no-cache"], input=QUERY + ";\n")
    assert done.exit_code == 0, done.output
    assert "carry little signal" in done.stderr


def test_dbt_says_it_at_the_end_of_the_run():
    pytest.importorskip("dbt.adapters.duckdb", reason="dbt-duckdb is a dev extra (aisql-engine[dbt])")
    from aisql.dbt_plugin import Plugin

    plugin = Plugin("aisql", {"model": "tiny", "quiet": True})
    atexit.unregister(plugin._report)  # reported here, not again when the test process ends

    class Handle:
        stats = {"ai_if": NodeStats(node="ai_if", function="ai_if", strategy="vector", rows_in=50, answers_scored=50, answers_yes=0, answers_near_boundary=0)}

    Handle.stats["ai_if"].log_odds_squares = 50 * 4.0
    plugin.handle = Handle()
    said = io.StringIO()
    with redirect_stderr(said):
        plugin._report()
    assert "aisql: warning: ai_if's answers carry little signal: all 50 answers are No" in said.getvalue()


def test_the_duckdb_functions_count_what_the_warnings_read(tiny_engine):
    import duckdb

    import aisql

    con = duckdb.connect()
    handle = aisql.register(con, engine=tiny_engine, cache=False)
    con.sql("SELECT ai_if(prompt('Is {0} a prime number?', i)) FROM range(40) t(i)").fetchall()
    con.sql("SELECT ai_if(prompt('Is {0} a prime number?', i)) FROM range(40) t(i)").fetchall()  # counted once
    stats = handle.stats["ai_if"]
    assert stats.answers_scored == 40 and sum(stats.p_yes_bins) == 40
    assert sum(stats.value_counts.values()) == 40
    assert signals.quality_lines([stats])[0].text.startswith("ai_if ai_if: Yes for")


def test_the_duckdb_functions_warn_once_and_summarize(tiny_engine, always_one_sided):
    import duckdb

    import aisql
    from aisql.errors import AisqlWarning

    con = duckdb.connect()
    handle = aisql.register(con, engine=tiny_engine, cache=False)
    with pytest.warns(AisqlWarning, match="ai_if's answers carry little signal") as said:
        con.sql("SELECT ai_if(prompt('Is {0} a prime number?', i)) FROM range(40) t(i)").fetchall()
        con.sql("SELECT ai_if(prompt('Is {0} an odd number?', i)) FROM range(40) t(i)").fetchall()
    assert len([w for w in said if issubclass(w.category, AisqlWarning)]) == 1  # once per registration
    summary = handle.summary()
    assert summary.startswith("ai_if: 80 rows, 80 distinct prompts") and "warning: ai_if's answers carry little signal" in summary


def test_python_results_have_a_short_repr_and_the_summary(make_connection, always_one_sided):
    from aisql.errors import AisqlWarning

    with pytest.warns(AisqlWarning):
        result = make_connection().run(QUERY)
    assert repr(result).startswith("<QueryResult 40 rows · AI: 40 prompts") and len(repr(result)) < 400
    first, *rest = result.summary().splitlines()
    assert first == repr(result)[len("<QueryResult ") : -1]
    assert any(line.startswith("warning: ai_1's answers carry little signal") for line in rest)


def test_the_typed_generators_have_a_quality_line():
    """AI.GENERATE_BOOL printed no quality line at all (issue 60): its true share is said, and
    one side for nearly every prompt warns, as AI.IF's does; a number generator says its range
    and warns when every prompt gets one value."""
    from aisql.executor.report.signals import quality_lines, warnings_of

    mixed = NodeStats(node="ai_1", function="AI.GENERATE_BOOL(...)", strategy="prefetch")
    mixed.count_generated([True] * 12 + [False] * 8 + [None])
    lines = quality_lines([mixed])
    assert [line.text for line in lines] == ["ai_1 AI.GENERATE_BOOL(...): true for 57% of 21 distinct prompts (1 NULL: no literal of the type)"]
    assert not any(line.warning for line in lines)

    one_sided = NodeStats(node="ai_2", function="AI.GENERATE_BOOL(...)", strategy="prefetch")
    one_sided.count_generated([True] * 40 + [False])
    assert "ai_2's answers carry little signal: true for 98% of 41 prompts" in warnings_of([one_sided])[0]

    numbers = NodeStats(node="ai_3", function="AI.GENERATE_INT(...)", strategy="prefetch")
    numbers.count_generated([4] * 25)
    lines = quality_lines([numbers])
    assert lines[0].text == "ai_3 AI.GENERATE_INT(...): values 4 to 4 over 25 distinct prompts" and lines[1].warning
