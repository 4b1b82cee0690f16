"""Planner rules, no model: node order, strategy, filter order, and input relations vs brute force."""

from __future__ import annotations

import dataclasses
import itertools

import duckdb
import pytest

from aisql.planner import Clause, NodeRole, PlanningContext, Strategy, plan_statement
from aisql.planner.rules import RULES, guard_filters, order_filters
from aisql.sql import SourceText, bind_statement, parse_script


def plan(sql: str, rules=RULES):
    source = SourceText(sql)
    (statement,) = parse_script(source)
    return plan_statement(bind_statement(statement, source, "__p_"), rules=rules)


def texts(p):
    return [n.call.template.text for n in p.nodes]


def test_roles_and_clauses():
    p = plan(
        "SELECT AI.GENERATE(PROMPT('a {x}')) FROM t JOIN u ON AI.IF(PROMPT('b {t.x} {u.y}')) "
        "WHERE AI.IF(PROMPT('c {x}')) GROUP BY 1 HAVING AI.IF(PROMPT('d {0}', count(*)))"
    )
    by_text = {n.call.template.text: n for n in p.nodes}
    assert by_text["b {t.x} {u.y}"].role is NodeRole.JOIN
    assert by_text["c {x}"].role is NodeRole.FILTER and by_text["c {x}"].location.clause is Clause.WHERE
    assert by_text["d {0}"].location.clause is Clause.HAVING
    assert by_text["a {x}"].role is NodeRole.PROJECT


def test_order_follows_how_rows_flow():
    p = plan(
        "WITH w AS (SELECT * FROM t WHERE AI.IF(PROMPT('cte {x}'))) "
        "SELECT AI.GENERATE(PROMPT('select {x}')) FROM w JOIN u ON AI.IF(PROMPT('join {w.x} {u.y}')) "
        "WHERE AI.IF(PROMPT('where {x}'))"
    )
    assert texts(p) == ["cte {x}", "join {w.x} {u.y}", "where {x}", "select {x}"]


def test_nested_call_runs_first_and_aggregates_after_keys():
    p = plan("SELECT AI.IF(PROMPT('outer {0}', AI.GENERATE(PROMPT('inner {x}')))) FROM t")
    assert texts(p) == ["inner {x}", "outer {0}"]
    p = plan("SELECT AI.GENERATE(PROMPT('agg {0}', string_agg(x))), AI.CLASSIFY(PROMPT('key {x}'), ['a', 'b']) FROM t GROUP BY ALL")
    assert texts(p) == ["key {x}", "agg {0}"]


@pytest.mark.parametrize(
    "sql, strategy",
    [
        ("SELECT AI.GENERATE(x) FROM t", Strategy.PREFETCH),
        ("SELECT AI.GENERATE(x) FROM t LIMIT 3", Strategy.STREAMING),
        ("SELECT id, AI.GENERATE(x) FROM t ORDER BY id LIMIT 3", Strategy.PREFETCH),  # the 3 rows' sort keys (input_limited)
        ("SELECT AI.GENERATE(x) AS g FROM t ORDER BY g LIMIT 3", Strategy.PREFETCH),
        ("SELECT AI.GENERATE(x) FROM t ORDER BY 1 LIMIT 3", Strategy.PREFETCH),
        ("SELECT DISTINCT AI.GENERATE(x) FROM t LIMIT 3", Strategy.PREFETCH),
        ("SELECT x FROM t WHERE AI.IF(x) LIMIT 3", Strategy.PREFETCH),  # in chunks, stopping at 3 rows
        ("SELECT x FROM t WHERE AI.IF(x) ORDER BY x LIMIT 3", Strategy.PREFETCH),
        ("SELECT count(*) FROM t WHERE AI.IF(x) LIMIT 3", Strategy.PREFETCH),
    ],
)
def test_strategy(sql, strategy):
    (node,) = plan(sql).nodes
    assert node.strategy is strategy


@pytest.mark.parametrize(
    "sql, limited",
    [
        ("SELECT id, AI.GENERATE(x) FROM t ORDER BY id LIMIT 3", True),
        ("SELECT id, AI.GENERATE(x) FROM t ORDER BY id DESC NULLS FIRST LIMIT 3 OFFSET 2", True),
        ("SELECT id, AI.GENERATE(x) AS g FROM t ORDER BY g LIMIT 3", False),  # sorted by the answers
        ("SELECT id AS k, AI.GENERATE(x) FROM t ORDER BY k LIMIT 3", False),  # a SELECT alias: not recomputed
        ("SELECT AI.GENERATE(x) FROM t ORDER BY 1 LIMIT 3", False),
        ("SELECT id, AI.GENERATE(x) FROM t WHERE AI.IF(x) ORDER BY id LIMIT 3", True),  # after the filter's answers
        ("SELECT id, AI.GENERATE(x) FROM t ORDER BY id", False),
    ],
)
def test_a_column_under_order_by_limit_asks_only_the_kept_rows(sql, limited):
    """AI.EMBED / AI.GENERATE under `ORDER BY id LIMIT 3` used to be asked for every row."""
    nodes = [n for n in plan(sql).nodes if n.call.function.name == "GENERATE"]
    assert nodes[0].input_limited is limited


@pytest.mark.parametrize(
    "sql, stop_after",
    [
        ("SELECT x FROM t WHERE AI.IF(x) LIMIT 3", 3),
        ("SELECT x FROM t WHERE AI.IF(x) LIMIT 3 OFFSET 2", 5),
        ("SELECT x FROM t WHERE NOT AI.IF(x) LIMIT 3", 3),
        ("SELECT a.x FROM t a JOIN t b ON AI.IF(PROMPT('{a.x} {b.x}')) LIMIT 4", 4),
        ("SELECT a.x FROM t a LEFT JOIN t b ON AI.IF(PROMPT('{a.x} {b.x}')) LIMIT 4", None),  # unasked must not become NULL rows
        ("SELECT x FROM t WHERE AI.IF(x) ORDER BY x LIMIT 3", None),
        ("SELECT count(*) FROM t WHERE AI.IF(x) LIMIT 3", None),
        ("SELECT x FROM t WHERE AI.IF(x) AND AI.IF(PROMPT('{x}?')) LIMIT 3", None),  # one AI call only
        ("SELECT * FROM (SELECT x FROM t WHERE AI.IF(x) LIMIT 3)", None),  # not the outermost SELECT
        ("SELECT AI.CLASSIFY(x, ['a', 'b']) FROM t LIMIT 3", None),  # not a predicate
    ],
)
def test_stop_at_limit(sql, stop_after):
    nodes = plan(sql).nodes
    assert nodes[0].stop_after == stop_after


def test_final_filters_follow_plan_order():
    sql = "SELECT 1 FROM t WHERE AI.IF(PROMPT('first {x}')) AND y > 1 AND AI.IF(PROMPT('second {x}'))"
    p = plan(sql)
    first, second = (n.function_name.upper() for n in p.nodes)
    where = p.final_sql.upper().split("WHERE", 1)[1]
    assert where.index("Y > 1") < where.index(first) < where.index(second)
    # If a rule evaluates the second predicate first, the final query must ask in that order too.
    unguarded = plan(sql, rules=tuple(r for r in RULES if r is not guard_filters))
    context = PlanningContext()
    swapped = guard_filters(order_filters(dataclasses.replace(unguarded, nodes=tuple(reversed(unguarded.nodes))), context), context)
    where = swapped.final_sql.upper().split("WHERE", 1)[1]
    assert where.index("Y > 1") < where.index(second) < where.index(first)


def test_final_filters_pin_the_order_duckdb_evaluates():
    """DuckDB may evaluate a conjunction's parts in any order (over a CSV scan it runs a Python
    function first): each AI conjunct sits in one CASE, reached only by rows that passed the
    conjuncts before it, and every AI call appears once (repeated, DuckDB would compute it below
    the filter for every row)."""
    p = plan("SELECT 1 FROM t WHERE AI.IF(PROMPT('a {x}')) AND y > 1 AND AI.IF(PROMPT('b {x}'))")
    first, second = (n.function_name.upper() for n in p.nodes)
    where = p.final_sql.upper().split("WHERE", 1)[1]
    assert where.startswith(" Y > 1 AND CASE WHEN NOT (Y > 1) IS TRUE THEN FALSE WHEN NOT (" + first)
    assert where.count(first) == 1 and where.count(second) == 1
    assert "ELSE " + second in where
    (later,) = [n for n in p.nodes if n.function_name.upper() == second]
    assert "CASE WHEN NOT (Y > 1) IS TRUE THEN FALSE ELSE " + first in later.input_sql.upper()
    assert plan("SELECT 1 FROM t WHERE y > random() AND AI.IF(x)").final_sql.upper().count("CASE") == 0


def test_later_nodes_filter_by_earlier_answers_and_estimates_drop_them():
    p = plan("SELECT 1 FROM t WHERE AI.IF(PROMPT('a {x}')) AND AI.IF(PROMPT('b {x}'))")
    first, second = p.nodes
    assert second.depends_on == (first.id,)
    assert first.function_name.upper() in second.input_sql.upper()
    assert first.function_name.upper() not in (second.estimate_sql or "").upper()
    assert second.estimate_is_upper_bound and not first.estimate_is_upper_bound


# ---- input relations against brute force -------------------------------------------------

T = [(i, f"x{i % 4}", i % 3) for i in range(1, 9)]  # (id, x, g): x repeats, g groups
U = [(j, f"y{j}", j * 10) for j in range(1, 5)]  # (id, y, price)


@pytest.fixture
def con():
    c = duckdb.connect()
    c.execute("CREATE TABLE t AS SELECT * FROM (VALUES " + ",".join(f"({i}, '{x}', {g})" for i, x, g in T) + ") v(id, x, g)")
    c.execute("CREATE TABLE u AS SELECT * FROM (VALUES " + ",".join(f"({j}, '{y}', {p})" for j, y, p in U) + ") v(id, y, price)")
    return c


def count_by(rows, keep, key) -> dict:
    """Brute force: how many rows pass `keep`, per argument tuple `key(row)`."""
    counts: dict = {}
    for row in rows:
        if keep(*row):
            counts[key(*row)] = counts.get(key(*row), 0) + 1
    return counts


def input_tuples(con, sql):
    p = plan(sql)
    node = p.nodes[0]
    rows = con.execute(node.input_sql).fetchall()
    return {row[:-1]: row[-1] for row in rows}


def test_where_input_is_the_rows_passing_the_other_conjuncts(con):
    got = input_tuples(con, "SELECT id FROM t WHERE id > 2 AND AI.IF(PROMPT('{x}')) AND g <> 1")
    assert got == count_by(T, lambda i, x, g: i > 2 and g != 1, lambda i, x, g: (x,))


def test_inner_join_input_is_the_pairs_passing_all_other_conditions(con):
    got = input_tuples(
        con, "SELECT 1 FROM t JOIN u ON u.price > t.id AND AI.IF(PROMPT('{t.x} {u.y}')) WHERE t.g = 0 AND u.id < 4"
    )
    pairs = [t + u for t, u in itertools.product(T, U)]
    assert got == count_by(pairs, lambda i, x, g, j, y, price: price > i and g == 0 and j < 4, lambda i, x, g, j, y, price: (x, y))


def test_left_join_input_keeps_only_left_side_where_conjuncts(con):
    got = input_tuples(
        con, "SELECT 1 FROM t LEFT JOIN u ON u.price > 15 AND AI.IF(PROMPT('{t.x} {u.y}')) WHERE t.id <= 5 AND u.id IS NULL"
    )
    pairs = [t + u for t, u in itertools.product(T, U)]
    # u.id IS NULL must not be pushed below the outer join; t.id <= 5 may.
    assert got == count_by(pairs, lambda i, x, g, j, y, price: price > 15 and i <= 5, lambda i, x, g, j, y, price: (x, y))


def test_right_join_input_pushes_no_where(con):
    got = input_tuples(con, "SELECT 1 FROM t RIGHT JOIN u ON AI.IF(PROMPT('{t.x} {u.y}')) WHERE t.id <= 5")
    assert sum(got.values()) == len(T) * len(U)


def test_select_input_is_the_rows_surviving_where(con):
    got = input_tuples(con, "SELECT AI.CLASSIFY(x, ['a', 'b']) FROM t WHERE g = 2")
    assert got == count_by(T, lambda i, x, g: g == 2, lambda i, x, g: (x,))


def test_aggregate_prompt_input_is_one_row_per_group(con):
    got = input_tuples(con, "SELECT g, AI.GENERATE(PROMPT('{0}', string_agg(x, ',' ORDER BY id))) FROM t WHERE id > 1 GROUP BY g")
    groups: dict = {}
    for i, x, g in T:
        if i > 1:
            groups.setdefault(g, []).append(x)
    assert got == {(",".join(xs),): 1 for xs in groups.values()}


def test_having_input_is_the_groups_passing_other_having_conjuncts(con):
    got = input_tuples(con, "SELECT g FROM t GROUP BY g HAVING count(*) > 2 AND AI.IF(PROMPT('{0}', max(x)))")
    groups: dict = {}
    for i, x, g in T:
        groups.setdefault(g, []).append(x)
    expected: dict = {}
    for xs in groups.values():
        if len(xs) > 2:
            expected[(max(xs),)] = expected.get((max(xs),), 0) + 1
    assert got == expected


def test_cte_input_includes_the_cte(con):
    got = input_tuples(con, "WITH small AS (SELECT * FROM t WHERE id < 4) SELECT AI.GENERATE(x) FROM small")
    assert sum(got.values()) == 3
