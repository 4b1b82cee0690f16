"""AI_AGG and AI_SUMMARIZE_AGG: aggregates with GROUP BY, in HAVING and over a whole table;
NULLs; bad arguments; planned == naive; the result cache; explain's map/reduce estimate; and a
group ten times the model's context, reduced hierarchically, deterministic, and resumed after a
kill -9 without repeating a committed prompt."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from aisql.errors import AisqlError

GROUPED = (
    "SELECT rating, AI_AGG(review, 'Summarize the complaints') AS complaints, AI_SUMMARIZE_AGG(review) AS summary "
    "FROM reviews WHERE id <= 30 GROUP BY rating ORDER BY rating"
)


@pytest.mark.slow
def test_group_by_having_and_whole_table(make_connection):
    con = make_connection()
    grouped = con.run(GROUPED).table.to_pylist()
    ratings = [r[0] for r in con.duckdb.sql("SELECT DISTINCT rating FROM reviews WHERE id <= 30 ORDER BY 1").fetchall()]
    assert [r["rating"] for r in grouped] == ratings
    assert all(isinstance(r["complaints"], str) and isinstance(r["summary"], str) for r in grouped)
    having = con.run(
        "SELECT rating FROM reviews WHERE id <= 30 GROUP BY rating "
        "HAVING AI_AGG(review, 'Summarize the complaints') = 'no such answer' OR rating >= 4 ORDER BY rating"
    ).table.column("rating").to_pylist()
    assert having == [r for r in ratings if r >= 4]
    whole = con.run("SELECT AI_SUMMARIZE_AGG(review) AS s, count(*) AS n FROM reviews WHERE id <= 30").table.to_pylist()
    assert len(whole) == 1 and isinstance(whole[0]["s"], str) and whole[0]["n"] == 30


def test_nulls_are_skipped_and_a_group_without_values_is_null(make_connection):
    con = make_connection()
    rows = con.run(
        "SELECT g, AI_AGG(v, 'List the fruits') AS a FROM (VALUES (1, 'apple'), (1, NULL), (2, NULL)) t(g, v) GROUP BY g ORDER BY g"
    ).table.to_pylist()
    assert isinstance(rows[0]["a"], str) and rows[1]["a"] is None
    empty = con.run("SELECT AI_AGG(review, 'Summarize') AS a FROM reviews WHERE false").table.to_pylist()
    assert empty == [{"a": None}]
    # NULLs do not change a group's answer: the group is its non-NULL values, sorted
    with_null = con.run("SELECT AI_AGG(v, 'List the fruits') AS a FROM (VALUES ('pear'), (NULL), ('apple')) t(v)").table.to_pylist()
    without = con.run("SELECT AI_AGG(v, 'List the fruits') AS a FROM (VALUES ('apple'), ('pear')) t(v)").table.to_pylist()
    assert with_null == without


@pytest.mark.parametrize(
    "sql, message",
    [
        ("SELECT AI_AGG(review, 'x') OVER (PARTITION BY rating) FROM reviews", "OVER (...) is not supported"),
        ("SELECT AI_AGG(review, review) FROM reviews", "must be a non-empty string literal"),
        ("SELECT AI_AGG(review, '  ') FROM reviews", "must be a non-empty string literal"),
        ("SELECT AI_SUMMARIZE_AGG() FROM reviews", "AI_SUMMARIZE_AGG: an argument is missing"),  # sqlglot knows the arity
        ("SELECT AI_AGG(review) FROM reviews", "AI_AGG: an argument is missing"),  # was "incomplete expression"
        ("SELECT AI_AGG(DISTINCT review, 'x') FROM reviews", "AI_AGG(DISTINCT ...) is not supported"),
        ("SELECT AI.IF(PROMPT('{review}')) FILTER (WHERE rating > 2) FROM reviews", "AI.IF is not an aggregate"),
        ("SELECT AI_AGG(review, 'a', 'b') FROM reviews", "greater than the maximum number of supported arguments (2)"),
    ],
)
def test_bad_arguments(make_connection, sql, message):
    with pytest.raises(AisqlError) as err:
        make_connection().run(sql)
    assert message in err.value.message
    assert err.value.line == 1


@pytest.mark.slow  # over ~2.5 s: the fast tier stays under 3 min
def test_filter_narrows_the_values_as_on_any_aggregate(make_connection):
    """`AI_AGG(v, task) FILTER (WHERE c)` (and `AI.AGG(...) FILTER`, which sqlglot reads as a
    column) gives the group the values meeting c — what a CASE that NULLs the others gives."""
    con = make_connection()
    query = (
        "SELECT rating, AI_AGG(review, 'Summarize') FILTER (WHERE id % 2 = 0) AS a, "
        "AI.AGG(review, 'Summarize') FILTER (WHERE id % 2 = 0) AS b, "
        "AI_AGG(CASE WHEN id % 2 = 0 THEN review END, 'Summarize') AS c FROM reviews WHERE id <= 12 GROUP BY rating ORDER BY rating"
    )
    planned = con.run(query).table.to_pylist()
    assert planned and all(row["a"] == row["b"] == row["c"] for row in planned)
    assert con.run(query, naive=True).table.to_pylist() == planned


@pytest.mark.slow
def test_planned_equals_naive_and_reruns_hit_the_cache(make_connection, tmp_path):
    planned = make_connection(cache=str(tmp_path / "a.sqlite")).run(GROUPED)
    naive = make_connection().run(GROUPED, naive=True)
    assert planned.table.to_pylist() == naive.table.to_pylist()
    again = make_connection(cache=str(tmp_path / "a.sqlite")).run(GROUPED)
    assert again.stats.totals()["prompts_evaluated"] == 0
    assert again.table.to_pylist() == planned.table.to_pylist()


def test_explain_estimates_map_and_reduce(make_connection):
    con = make_connection()
    node = con.explain(GROUPED).to_dict()["statements"][0]["ai_nodes"][0]
    assert node["function"] == "AI_AGG(review, 'Summarize the complaints')"
    assert "map 5 prompts, reduce 0 prompts, depth 1" in node["estimate_reason"]


# ---- a group ten times the context --------------------------------------------------------------
BIG = (
    "SELECT AI_AGG(review, 'Summarize the complaints') AS s "
    "FROM (SELECT r.review || ' (' || i || ')' AS review FROM 'data/reviews.csv' r, range(36) t(i))"
)  # 4,320 values, ~84k tokens of the tiny model: 10x its context of 8,192


def _aisql(*args: str) -> list[str]:
    return [sys.executable, "-m", "aisql.cli", "run", "-e", BIG, "--model", "tiny", "--format", "json", "-q", *args]


from test_crash_safety import committed as _committed  # answers committed, read as another process would


@pytest.mark.slow
def test_group_ten_times_the_context_resumes_after_kill(tiny_engine, tmp_path):
    from conftest import EXAMPLES

    stats = tmp_path / "reference.json"
    reference = subprocess.run(_aisql("--cache", str(tmp_path / "ref.sqlite"), "--stats-json", str(stats)), cwd=EXAMPLES, capture_output=True, text=True, timeout=600)
    assert reference.returncode == 0, reference.stderr
    total = json.loads(stats.read_text())
    assert total["prompts_evaluated"] >= 12  # map prompts over ~16 chunks, then a reduce: depth 2

    cache = tmp_path / "answers.sqlite"
    job = subprocess.Popen(_aisql("--cache", str(cache), "--checkpoint-every", "1"), cwd=EXAMPLES, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while _committed(cache) < 3 and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert job.poll() is None, f"the job ended before it could be killed: {job.stderr.read().decode()}"
    job.send_signal(signal.SIGKILL)
    job.wait(timeout=60)
    job.stderr.close()
    saved = _committed(cache)
    assert 3 <= saved < total["prompts_evaluated"]

    resumed_stats = tmp_path / "resumed.json"
    resumed = subprocess.run(_aisql("--cache", str(cache), "--stats-json", str(resumed_stats)), cwd=EXAMPLES, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == json.loads(reference.stdout)  # deterministic across runs
    again = json.loads(resumed_stats.read_text())
    assert again["prompts_evaluated"] == total["prompts_evaluated"] - saved  # only what was missing
    assert again["prompts_cached"] >= saved


@pytest.mark.slow
def test_register_offers_ai_agg_over_a_list(make_connection, tiny_engine):
    """DuckDB's Python API has no aggregate UDFs: aisql.register's ai_agg takes the group's list,
    and answers exactly as the planned aggregate (the same sorted values, the same prompts)."""
    import duckdb

    import aisql

    con = duckdb.connect()
    aisql.register(con, engine=tiny_engine, cache=False)
    con.sql("CREATE TABLE reviews AS FROM read_csv_auto('examples/data/reviews.csv')".replace("examples/", str(__import__("conftest").EXAMPLES) + "/"))
    udf = con.sql(
        "SELECT rating, ai_agg(list(review), 'Summarize the complaints') AS complaints, ai_summarize_agg(list(review)) AS summary "
        "FROM reviews WHERE id <= 30 GROUP BY rating ORDER BY rating"
    ).fetchall()
    planned = make_connection().run(GROUPED).table.to_pylist()
    assert udf == [tuple(row.values()) for row in planned]


def test_register_ai_agg_of_a_list_without_values_is_null(tiny_engine):
    """An empty or all-NULL list is a group without values: NULL, as the planned aggregate
    answers, without asking — it used to fail the whole query with an IndexError."""
    import duckdb

    import aisql

    con = duckdb.connect()
    functions = aisql.register(con, engine=tiny_engine, cache=False)
    rows = con.sql(
        "SELECT ai_agg(l, 'x') IS NULL, ai_summarize_agg(l) IS NULL "
        "FROM (VALUES (1, ['a','b']), (2, []::VARCHAR[]), (3, [NULL, NULL]::VARCHAR[]), (4, NULL)) v(i, l) ORDER BY i"
    ).fetchall()
    assert rows == [(False, False), (True, True), (True, True), (True, True)]
    assert functions.stats["ai_agg"].rows_in == 1 and functions.stats["ai_summarize_agg"].rows_in == 1
