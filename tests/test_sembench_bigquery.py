"""SemBench's movie queries as BigQuery runs them, unchanged but for SemBench's placeholders, on a
slice of its data (tests/data/sembench_movie: 6 movies, at most 8 reviews each) with `tiny`.

Planned == naive on every query; the LIMIT queries (Q1, Q2, Q5, Q6) under LIMIT's contract
(docs/architecture.md): every row returned qualifies under naive execution, and there are exactly
k of them when naive finds at least k.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import aisql

QUERIES = Path(__file__).resolve().parents[2] / "shared" / "data" / "sembench_movie" / "query" / "bigquery"
LOCAL_COPY = Path(__file__).parent / "data" / "sembench_movie" / "query" / "bigquery"
DATA = Path(__file__).parent / "data" / "sembench_movie"
LIMITED = {"Q1": 5, "Q2": 5, "Q5": 10, "Q6": 10}
FILLS = {"<<connection>>": "c", "<<query_id>>": "q", "<<thinking_budget>>": "0", "<<other_params>>": ""}


def query(name: str) -> str:
    text = (LOCAL_COPY / f"{name}.sql").read_text()
    for placeholder, value in FILLS.items():
        text = text.replace(placeholder, value)
    return text


@pytest.fixture(scope="module")
def engine():
    # float64: AI.SCORE's expectations from batched and one-prompt passes agree to the last bit
    # (in float32 they differ by batching noise, ~3e-6 on tiny; docs/architecture.md).
    from aisql.engine import EngineOptions, load_engine

    return load_engine("tiny", EngineOptions(dtype="float64"))


@pytest.fixture(scope="module")
def con(engine):
    connection = aisql.Connection(engine=engine, cache=False, dialect="bigquery")
    connection.duckdb.execute("CREATE SCHEMA movie")
    for table, file in (("reviews", "Reviews.csv"), ("movies", "Movies.csv")):
        connection.duckdb.execute(f"CREATE TABLE movie.{table} AS SELECT * FROM read_csv_auto('{DATA / file}')")
    yield connection
    connection.close()


def rows(result) -> list[tuple]:
    return sorted(tuple(row.values()) for row in result.table.to_pylist())


def same_rows(a: list[tuple], b: list[tuple]) -> bool:
    """Equal, floats (AI.SCORE's expectations) within 1e-6."""
    return len(a) == len(b) and all(
        len(x) == len(y) and all(abs(u - v) <= 1e-6 if isinstance(u, float) else u == v for u, v in zip(x, y)) for x, y in zip(a, b)
    )


def test_the_local_copies_are_sembenchs_queries():
    if not QUERIES.exists():
        pytest.skip("../shared is not beside this checkout")
    for name in [f"Q{i}" for i in range(1, 11)]:
        assert (LOCAL_COPY / f"{name}.sql").read_text() == (QUERIES / f"{name}.sql").read_text()


@pytest.mark.parametrize("name", [f"Q{i}" for i in range(1, 11)])
@pytest.mark.slow
def test_sembench_query_runs_unchanged_and_planned_equals_naive(con, engine, name):
    sql = query(name)
    engine.reset_cache()
    planned = con.run(sql)
    assert planned.stats.totals()["decode_passes"] == 0  # IF and SCORE: one forward pass per prompt
    assert any("connection_id ignored" in note for note in planned.stats.notes)
    if name not in LIMITED:
        naive = con.run(sql, naive=True)
        assert same_rows(rows(planned), rows(naive))
        return
    k = LIMITED[name]
    unlimited = re.sub(r"LIMIT\s+\d+\s*;?\s*$", "", sql.strip())
    qualifying = rows(con.run(unlimited, naive=True))
    got = rows(planned)
    assert len(got) == min(k, len(qualifying))
    remaining = list(qualifying)
    for row in got:  # a sub-multiset of what naive qualifies
        assert row in remaining, row
        remaining.remove(row)


def test_limit_stops_asking_once_enough_rows_qualify(con, engine):
    engine.reset_cache()
    sql = "SELECT reviewId FROM movie.reviews AS r WHERE AI.IF(('Is this review positive? ', r.reviewText)) LIMIT 2"
    planned = con.run(sql)
    totals = planned.stats.totals()
    assert planned.table.num_rows == 2
    assert totals["prompts_skipped"] > 0
    assert totals["prompts_evaluated"] < con.run(sql, naive=True).stats.totals()["prompts_evaluated"]
    explained = con.explain(sql)
    assert explained.plans[0].nodes[0].stop_after == 2


def test_limit_with_order_by_or_negation_evaluates_everything_needed(con):
    # ORDER BY decides which rows are first: every candidate is asked (no early stop).
    sql = "SELECT reviewId FROM movie.reviews AS r WHERE AI.IF(('Positive? ', r.reviewText)) ORDER BY reviewId LIMIT 3"
    assert con.explain(sql).plans[0].nodes[0].stop_after is None
    assert rows(con.run(sql)) == rows(con.run(sql, naive=True))
    # NOT AI.IF: an unasked prompt must never count as qualifying.
    negated = "SELECT reviewId FROM movie.reviews AS r WHERE NOT AI.IF(('Positive? ', r.reviewText)) LIMIT 2"
    qualifying = rows(con.run(negated.replace(" LIMIT 2", ""), naive=True))
    got = rows(con.run(negated))
    assert len(got) == min(2, len(qualifying)) and all(row in qualifying for row in got)
