"""A PROMPT placeholder means what the same column written in SQL means: `{t.txt}` sends the
same prompts as `t.txt || ...` in every scope — outer references of correlated subqueries,
shadowed aliases, CTEs, laterals, set operations. Checked by the prompt texts the engine sees,
planned and naive (naive execution would be wrong the same way, so it cannot catch this)."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest

from tests.test_planned_equals_naive import RecordingEngine

PAIRS = {
    "correlated_shadowed": (
        "SELECT txt, (SELECT count(*) FROM t t2 WHERE AI.IF(PROMPT('{t2.txt} like {t.txt}?'))) FROM t",
        "SELECT txt, (SELECT count(*) FROM t t2 WHERE AI.IF(t2.txt || ' like ' || t.txt || '?')) FROM t",
    ),
    "correlated_distinct_aliases": (
        "SELECT a.txt, (SELECT count(*) FROM t b WHERE AI.IF(PROMPT('{b.txt} like {a.txt}?'))) FROM t a",
        "SELECT a.txt, (SELECT count(*) FROM t b WHERE AI.IF(b.txt || ' like ' || a.txt || '?')) FROM t a",
    ),
    "exists_outer_reference": (
        "SELECT txt FROM t WHERE EXISTS (SELECT 1 FROM u WHERE AI.IF(PROMPT('{u.txt} and {t.txt}')))",
        "SELECT txt FROM t WHERE EXISTS (SELECT 1 FROM u WHERE AI.IF(u.txt || ' and ' || t.txt))",
    ),
    "cte_named_like_a_table": (
        "WITH t AS (SELECT upper(txt) AS txt FROM u) SELECT AI.IF(PROMPT('{t.txt}?')) FROM t",
        "WITH t AS (SELECT upper(txt) AS txt FROM u) SELECT AI.IF(t.txt || '?') FROM t",
    ),
    "lateral": (
        "SELECT x.txt, l.y FROM t x, LATERAL (SELECT AI.IF(PROMPT('say {x.txt}')) AS y) l",
        "SELECT x.txt, l.y FROM t x, LATERAL (SELECT AI.IF('say ' || x.txt) AS y) l",
    ),
    "set_operation": (
        "SELECT AI.IF(PROMPT('{t.txt} red')) FROM t UNION ALL SELECT AI.IF(PROMPT('{t.txt} blue')) FROM u t",
        "SELECT AI.IF(t.txt || ' red') FROM t UNION ALL SELECT AI.IF(t.txt || ' blue') FROM u t",
    ),
    "derived_table_alias_shadows": (
        "SELECT AI.IF(PROMPT('{t.txt}!')) FROM (SELECT txt || 'x' AS txt FROM t) t",
        "SELECT AI.IF(t.txt || '!') FROM (SELECT txt || 'x' AS txt FROM t) t",
    ),
}


def _prompts(tiny_engine, query: str, naive: bool) -> tuple[Counter, list]:
    import aisql

    engine = RecordingEngine(tiny_engine)
    con = aisql.connect(engine=engine, cache=False)
    con.register("t", pa.table({"txt": ["apple", "banana", "cherry"]}))
    con.register("u", pa.table({"txt": ["kiwi", "lime"]}))
    result = con.run(query, naive=naive)
    con.close()
    return Counter(engine.texts), sorted(map(repr, (tuple(r.values()) for r in result.table.to_pylist())))


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_placeholders_bind_like_sql_columns(tiny_engine, name):
    with_placeholders, with_concat = PAIRS[name]
    for naive in (False, True):
        prompts, rows = _prompts(tiny_engine, with_placeholders, naive)
        expected_prompts, expected_rows = _prompts(tiny_engine, with_concat, naive)
        assert set(prompts) == set(expected_prompts), f"naive={naive}"
        assert rows == expected_rows, f"naive={naive}"
        if naive:
            assert prompts == expected_prompts


def test_output_columns_are_named_as_written(tiny_engine):
    """An unaliased AI column is named after the expression the user wrote, never after the
    bound call aisql generated (`__aisql_...(CAST(...))`), in planned and naive runs alike."""
    import aisql

    con = aisql.connect(engine=tiny_engine, cache=False)
    con.register("t", pa.table({"txt": ["apple"]}))
    for naive in (False, True):
        names = con.run("SELECT txt, AI.IF(PROMPT('{txt} ok')), upper(AI.GENERATE(PROMPT('say {txt}'), max_tokens => 2)) FROM t", naive=naive).table.column_names
        assert names[1] == "AI.IF(PROMPT('{txt} ok'))" and names[2].startswith("UPPER(AI.GENERATE(")
        assert not any("__aisql" in name for name in names)
