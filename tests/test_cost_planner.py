"""Cost-based planning: predicate order (rank, DP) and anchors against brute force, the cost model's
pieces against exact counts, prompt order, and explain's estimates against a real run."""

from __future__ import annotations

import itertools
import json
import math
import random
from dataclasses import dataclass

import duckdb
import pytest

from aisql.errors import BindError
from aisql.planner import PlanningContext, plan_statement
from aisql.planner.cost import computed_tokens, reduction, shrink
from aisql.planner.rules.order_predicates import conjunction_groups, dp_order, order_cost
from aisql.planner.statistics import InputProfile, Selectivity, TokenProfile
from aisql.sql import SourceText, bind_statement, parse_script


def bound(sql: str):
    source = SourceText(sql)
    (statement,) = parse_script(source)
    return bind_statement(statement, source, "__c_")


@dataclass
class FakeStats:
    """Planner test double: counts, tokens and selectivities given per template text."""

    inputs: dict
    tokens: dict
    selectivities: dict
    distincts: dict
    model = None

    def _key(self, node):
        return node.call.template.text

    def input_profile(self, node):
        return self.inputs.get(self._key(node))

    def token_profile(self, node):
        return self.tokens.get(self._key(node))

    def selectivity(self, node):
        return Selectivity(self.selectivities.get(self._key(node), 0.5), "test")

    def distinct(self, node, tables):
        return self.distincts.get((self._key(node), frozenset(tables)))


def tokens(per_tuple: float, shared: float = 10.0) -> TokenProfile:
    return TokenProfile(shared=shared, segments=(per_tuple,), tail=0.0)


# ---- rank ordering: predicates on the same rows ------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_dp_order_is_rank_order_and_the_brute_force_optimum_for_same_table_predicates(seed):
    rng = random.Random(seed)
    templates = [f"q{i} {{text}}" for i in range(4)]
    sql = "SELECT id FROM t WHERE " + " AND ".join(f"AI.IF(PROMPT('{t}'))" for t in templates)
    costs = {t: rng.uniform(5, 200) for t in templates}
    sels = {t: rng.uniform(0.05, 0.95) for t in templates}
    stats = FakeStats(
        inputs={t: InputProfile(1000, 1000, (1000,), frozenset({"t"})) for t in templates},
        tokens={t: tokens(costs[t]) for t in templates},
        selectivities=sels,
        distincts={},
    )
    plan = plan_statement(bound(sql), PlanningContext(stats))
    chosen = [n.call.template.text for n in plan.nodes]
    rank = sorted(templates, key=lambda t: costs[t] / (1 - sels[t]))
    assert chosen == rank
    # And no other order is cheaper under the cost model.
    (group,) = conjunction_groups(plan.nodes)
    unit = lambda n, before: costs[n.call.template.text]  # noqa: E731
    factor = lambda q, p: sels[q.call.template.text]  # noqa: E731
    unique = lambda n: 1000.0  # noqa: E731
    best = min(order_cost(list(order), unit, factor, unique) for order in itertools.permutations(group))
    assert math.isclose(order_cost(list(plan.nodes), unit, factor, unique), best)


# ---- DP over joins -----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_dp_order_matches_brute_force_with_joins_and_shared_prefixes(seed):
    rng = random.Random(seed)
    sql = (
        "SELECT 1 FROM r JOIN d ON AI.IF(PROMPT('{r.text} a {d.term}')) JOIN m ON AI.IF(PROMPT('{r.text} b {m.term}')) "
        "WHERE AI.IF(PROMPT('{r.text} c')) AND AI.IF(PROMPT('{r.text} d'))"
    )
    plan = plan_statement(bound(sql))
    (group,) = conjunction_groups(plan.nodes)
    assert len(group) == 4
    unit_costs = {n.id: (rng.uniform(10, 100), rng.uniform(1, 10)) for n in group}  # (cold, prefix cached)
    factors = {(q.id, p.id): rng.uniform(0.1, 1.0) for q in group for p in group if q is not p}
    uniques = {n.id: rng.uniform(10, 500) for n in group}
    unit = lambda n, before: unit_costs[n.id][1 if before else 0]  # noqa: E731
    factor = lambda q, p: factors[(q.id, p.id)]  # noqa: E731
    unique = lambda n: uniques[n.id]  # noqa: E731
    chosen = dp_order(list(group), unit, factor, unique)
    best = min(order_cost(list(order), unit, factor, unique) for order in itertools.permutations(group))
    assert math.isclose(order_cost(chosen, unit, factor, unique), best)


def test_a_filter_on_one_table_shrinks_a_join_predicate_by_its_selectivity_and_a_join_by_partners():
    sql = "SELECT 1 FROM r JOIN d ON AI.IF(PROMPT('{r.text} {d.term}')) WHERE AI.IF(PROMPT('{r.text} x'))"
    plan = plan_statement(bound(sql))
    join, filter_ = sorted(plan.nodes, key=lambda n: n.location.clause.value)
    stats = FakeStats(
        inputs={
            "{r.text} {d.term}": InputProfile(200, 200, (20, 200), frozenset({"r", "d"})),
            "{r.text} x": InputProfile(20, 20, (20,), frozenset({"r"})),
        },
        tokens={},
        selectivities={"{r.text} x": 0.25, "{r.text} {d.term}": 0.1},
        distincts={("{r.text} {d.term}", frozenset({"r"})): 20},
    )
    assert reduction(filter_, join, stats) == pytest.approx(0.25)
    # Each r has 10 partners in d: it survives the join if any of its 10 pairs is TRUE.
    assert reduction(join, filter_, stats) == pytest.approx(1 - 0.9**10)


# ---- cost model pieces ---------------------------------------------------------------------------


def test_segment_model_equals_the_prefix_tree_when_values_share_nothing():
    rng = random.Random(0)
    anchors = [tuple(rng.randrange(100, 200) for _ in range(rng.randint(3, 6))) for _ in range(5)]
    tails = [tuple(rng.randrange(300, 400) for _ in range(rng.randint(1, 4))) for _ in range(7)]
    head = (1, 2, 3)
    prompts = [head + a + (9,) + t + (7, 7) for a in anchors for t in tails]
    trie = len({p[:i] for p in prompts for i in range(1, len(p) + 1)})
    profile = TokenProfile(
        shared=len(head),
        segments=(sum(len(a) + 1 for a in anchors) / len(anchors), sum(len(t) for t in tails) / len(tails)),
        tail=2,
    )
    assert computed_tokens(profile, (5.0, 35.0), shared_paid=False) == pytest.approx(trie)


def test_shrink_keeps_a_group_if_any_of_its_tuples_survives():
    profile = InputProfile(100, 100, (10, 100))
    assert shrink(profile, 1.0) == (10.0, 100.0)
    half = shrink(profile, 0.5)
    assert half[1] == pytest.approx(50.0) and half[0] == pytest.approx(10 * (1 - 0.5**10))


# ---- anchors -------------------------------------------------------------------------------------


def test_anchor_is_the_first_placeholders_table_unless_hinted():
    plan = plan_statement(bound("SELECT 1 FROM c JOIN p ON AI.IF(PROMPT('{c.profile} buys {p.name}'))"))
    assert plan.nodes[0].anchor == "c" and plan.nodes[0].anchor_args == (0,)
    plan = plan_statement(bound("SELECT 1 FROM c JOIN p ON AI.IF(PROMPT('{c.profile} buys {p.name}'), {'anchor': 'p'})"))
    assert plan.nodes[0].anchor == "p" and plan.nodes[0].anchor_args == (1,)
    with pytest.raises(BindError, match="anchor 'x' is not a table"):
        plan_statement(bound("SELECT 1 FROM c JOIN p ON AI.IF(PROMPT('{c.profile} buys {p.name}'), {'anchor': 'x'})"))


# ---- prompt order ----------------------------------------------------------------------------------


class OrderRecorder:
    """Engine test double: token ids are the texts' characters; records the order of requests."""

    info = type("Info", (), {"max_context": 10_000})()
    format = type("Format", (), {"end_of_answer": None})()  # no end marker after labels

    def __init__(self):
        self.order = []

    def encode_prompts(self, instruction, texts):
        return [tuple(ord(c) for c in t) for t in texts]

    def encode_label(self, label, framing=None):
        return (ord(label[0]),)

    def score(self, requests, reuse=True):
        from aisql.engine.base import LabelScores

        self.order.extend("".join(map(chr, r.prompt_ids)) for r in requests)
        return [LabelScores((-0.1, -2.0)) for _ in requests]


def test_prompts_run_depth_first_over_their_prefix_tree_and_grouped_by_a_hinted_anchor():
    from aisql.executor.answers.evaluate import evaluate
    from aisql.functions import Task, by_name

    texts = ["b2 y", "a1 x", "b1 x", "a2 y", "a1 y", "b2 x"]
    engine = OrderRecorder()
    evaluate(engine, Task(by_name("IF"), "i", ("TRUE", "FALSE")), texts)
    assert engine.order == sorted(texts)  # shared prefixes adjacent
    engine = OrderRecorder()
    evaluate(engine, Task(by_name("IF"), "i", ("TRUE", "FALSE")), texts, group_by=lambda t: t[-1])
    assert engine.order == ["a1 x", "b1 x", "b2 x", "a1 y", "a2 y", "b2 y"]  # outer loop: the anchor


# ---- pushdown below joins --------------------------------------------------------------------------


def test_a_predicate_on_one_table_of_an_inner_join_reads_that_table_alone():
    con = duckdb.connect()
    con.execute("CREATE TABLE r AS SELECT range AS id, 'report ' || range AS text FROM range(6)")
    con.execute("CREATE TABLE d AS SELECT range AS id, 'term ' || range AS term FROM range(4)")
    plan = plan_statement(bound(
        "SELECT r.id FROM r JOIN d ON d.id < 3 AND AI.IF(PROMPT('{r.text} {d.term}')) WHERE r.id > 1 AND AI.IF(PROMPT('{r.text} x'))"
    ))
    single = next(n for n in plan.nodes if n.call.template.text == "{r.text} x")
    rows = con.execute(single.estimate_sql).fetchall()
    assert sorted(rows) == [(f"report {i}", 1) for i in range(2, 6)]  # r's rows, not r x d


# ---- explain against a run ---------------------------------------------------------------------------


def test_explain_estimates_a_run_within_twenty_percent(make_connection, tiny_engine):
    from aisql.engine import load_engine

    sql = (
        "SELECT c.id, p.id FROM customers c JOIN products p ON AI.IF(PROMPT('{c.profile} might buy {p.name}')) "
        "WHERE p.price < 100 AND c.id <= 20"
    )
    estimate = make_connection().explain(sql).to_dict()["statements"][0]
    result = make_connection(engine=load_engine("tiny")).run(sql)
    measured = result.stats.totals()
    planned = estimate["totals"]["plan"]
    assert planned["prompts"] == measured["prompts_evaluated"]
    assert abs(planned["tokens"] - measured["computed_tokens"]) <= 0.2 * measured["computed_tokens"]
    assert abs(estimate["totals"]["naive"]["tokens"] - measured["logical_tokens"]) <= 0.05 * measured["logical_tokens"]
    json.dumps(estimate)  # JSON-serialisable


def test_selectivity_is_sampled_for_large_inputs_only_and_hints_skip_sampling(make_connection):
    con = make_connection()
    con.duckdb.execute("CREATE TABLE many AS SELECT range AS id, 'text number ' || range AS t FROM range(300)")
    sql = "SELECT id FROM many WHERE AI.IF(PROMPT('{t} is odd')) AND AI.IF(PROMPT('{t} is prime'))"
    sampled = con.run(sql)
    assert {n.prompts_sampled for n in sampled.stats.nodes} == {32}
    hinted = make_connection()
    hinted.duckdb.execute("CREATE TABLE many AS SELECT range AS id, 'text number ' || range AS t FROM range(300)")
    result = hinted.run(
        "SELECT id FROM many WHERE AI.IF(PROMPT('{t} is odd'), {'selectivity': 0.9}) AND AI.IF(PROMPT('{t} is prime'), {'selectivity': 0.1})"
    )
    assert all(n.prompts_sampled == 0 for n in result.stats.nodes)
    assert "prime" in result.stats.nodes[0].function  # the selective predicate first
    small = make_connection().run("SELECT id FROM customers WHERE AI.IF(PROMPT('{profile} a')) AND AI.IF(PROMPT('{profile} b'))")
    assert all(n.prompts_sampled == 0 for n in small.stats.nodes)  # 40 rows: not worth sampling
