"""The dbt example (examples/dbt_reviews) builds with `dbt run`, through aisql's dbt-duckdb plugin,
and a second `dbt run` answers every prompt from the result cache."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from conftest import EXAMPLES

pytest.importorskip("dbt.adapters.duckdb", reason="dbt-duckdb is a dev extra (aisql-engine[dbt])")
pytestmark = pytest.mark.slow  # dbt in subprocesses

PROJECT = EXAMPLES / "dbt_reviews"


def dbt_run(tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        AISQL_MODEL="tiny",
        AISQL_DBT_DATABASE=str(tmp_path / "reviews.duckdb"),
        DBT_TARGET_PATH=str(tmp_path / "target"),
        DBT_LOG_PATH=str(tmp_path / "logs"),
        DBT_SEND_ANONYMOUS_USAGE_STATS="false",
    )
    dbt = shutil.which("dbt", path=str(Path(sys.executable).parent)) or "dbt"
    done = subprocess.run([dbt, "run", "--profiles-dir", "."], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def asked(done: subprocess.CompletedProcess) -> tuple[int, int]:
    said = re.search(r"aisql: [\d,]+ prompts \(([\d,]+) distinct\): [\d,]+ answered from the result cache, ([\d,]+) asked the model", done.stderr)
    assert said, done.stderr
    return int(said.group(1).replace(",", "")), int(said.group(2).replace(",", ""))


def test_dbt_run_builds_the_example_and_reuses_the_result_cache(tiny_engine, tmp_path: Path):
    import aisql

    distinct, first = asked(dbt_run(tmp_path))
    assert first == distinct > 0  # the first run asks the model for every distinct prompt
    with duckdb.connect(str(tmp_path / "reviews.duckdb"), read_only=True) as db:
        positive = sorted(db.sql("SELECT id FROM positive_reviews").fetchall())
        topics = db.sql("SELECT count(*), count(topic) FROM review_topics").fetchall()[0]
    assert topics[0] == topics[1] == 120

    # the same answers as aisql's own planned run of the same question
    con = aisql.connect(engine=tiny_engine, cache=False)
    planned = con.sql(
        f"SELECT id FROM read_csv_auto('{EXAMPLES / 'data' / 'reviews.csv'}') WHERE AI.IF(PROMPT('Is the following review positive? {{review}}')) ORDER BY id"
    ).fetchall()
    con.close()
    assert positive == planned

    _, second = asked(dbt_run(tmp_path))
    assert second == 0  # every answer from the result cache
