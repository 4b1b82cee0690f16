"""Rule: order the AI predicates of a conjunction by cost and selectivity.

The AI predicates of one SELECT's WHERE (and, when every join is inner, its JOIN ... ON
conditions) form one conjunction: any order gives the same rows, but each predicate runs only on
the input that survived those before it. For predicates on the same rows the classic answer is
rank = cost / (1 - selectivity), cheapest per row dropped first; with joins a predicate's input
depends on which tables the earlier ones filter, so we search all orders by dynamic programming
over subsets (exact under the cost model's independence assumption, fine for a handful of
predicates) and keep the one with the fewest computed tokens. Costs are computed tokens per
distinct input tuple, with the prefix cache; selectivities come from hints, samples or a default.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

from aisql.planner.cost import computed_tokens, filters_rows, leading_key, reduction
from aisql.planner.context import PlanningContext
from aisql.planner.plan import AINode, Clause, Plan
from aisql.planner.scope import find_bound_call
from aisql.planner.statistics import Statistics

MAX_DP_PREDICATES = 12


def order_predicates(plan: Plan, context: PlanningContext) -> Plan:
    stats = context.statistics
    if stats is None:
        return plan
    nodes = list(plan.nodes)
    for group in conjunction_groups(nodes):
        if len(group) < 2 or len(group) > MAX_DP_PREDICATES:
            continue
        best = best_order(group, stats)
        nodes = _place(nodes, group, best)
    return dataclasses.replace(plan, nodes=tuple(nodes))


def conjunction_groups(nodes: Sequence[AINode]) -> list[list[AINode]]:
    """AI predicates that share one conjunction: per SELECT, the WHERE filters plus — when every
    join is inner — the JOIN ON predicates. Calls nested in other calls' arguments are not members."""
    groups: dict[int, list[AINode]] = {}
    for node in nodes:
        loc = node.location
        if loc.select is None or loc.nesting or not filters_rows(node):
            continue
        joins = loc.select.args.get("joins") or []
        all_inner = all(not (j.args.get("side") or "") and (j.args.get("kind") or "").upper() in ("", "INNER", "CROSS") for j in joins)
        if loc.clause is Clause.WHERE or (loc.clause is Clause.JOIN and all_inner):
            groups.setdefault(id(loc.select), []).append(node)
    return list(groups.values())


def order_cost(
    order: Sequence[AINode],
    unit_cost: Callable[[AINode, tuple], float],
    factor: Callable[[AINode, AINode], float],
    unique: Callable[[AINode], float],
) -> float:
    """Computed tokens of running the predicates in `order` (the quantity dp_order minimises)."""
    total = 0.0
    for i, p in enumerate(order):
        shrink = 1.0
        for q in order[:i]:
            shrink *= factor(q, p)
        total += unique(p) * shrink * unit_cost(p, tuple(order[:i]))
    return total


def best_order(group: Sequence[AINode], stats: Statistics) -> list[AINode]:
    # Unit cost with and without the prompt's beginning already cached by an earlier predicate
    # of the same leading key (same instruction, static prefix and first argument).
    cost = {(n.id, cached): _unit_cost(n, stats, cached) for n in group for cached in (False, True)}
    keys = {n.id: leading_key(n) for n in group}
    uniq = {n.id: float((stats.input_profile(n).unique if stats.input_profile(n) else 1) or 1) for n in group}
    factors = {(q.id, p.id): reduction(q, p, stats) for q in group for p in group if q is not p}
    return dp_order(
        list(group),
        unit_cost=lambda n, before: cost[(n.id, any(keys[q.id] == keys[n.id] for q in before))],
        factor=lambda q, p: factors[(q.id, p.id)],
        unique=lambda n: uniq[n.id],
    )


def dp_order(group: list[AINode], unit_cost, factor, unique) -> list[AINode]:
    """Cheapest order by dynamic programming over subsets: the cost of adding p after a set S
    depends only on S (the product of S's reduction factors on p, and whether S already cached
    p's leading part). Ties keep the written order. `unit_cost(p, before)`: tokens per tuple of p
    when the predicates `before` ran first."""
    n = len(group)
    best: dict[int, tuple[float, tuple[int, ...]]] = {0: (0.0, ())}
    for mask in range(1, 1 << n):
        candidates = []
        for i in range(n):
            if not mask & (1 << i):
                continue
            before = mask & ~(1 << i)
            cost_before, order_before = best[before]
            shrink = 1.0
            for j in order_before:
                shrink *= factor(group[j], group[i])
            before_nodes = tuple(group[j] for j in order_before)
            candidates.append((cost_before + unique(group[i]) * shrink * unit_cost(group[i], before_nodes), order_before + (i,)))
        best[mask] = min(candidates, key=lambda c: (c[0], c[1]))
    return [group[i] for i in best[(1 << n) - 1][1]]


def _unit_cost(node: AINode, stats: Statistics, leading_cached: bool) -> float:
    """Computed tokens per distinct input tuple, with the prefix cache; `leading_cached`: an
    earlier predicate already put this prompt's beginning (up to the first value) in the cache."""
    profile, tokens = stats.input_profile(node), stats.token_profile(node)
    if profile is None or tokens is None or not profile.unique:
        return 1.0
    distinct = tuple(float(d) for d in profile.prefix_distinct)
    cached = distinct[0] if leading_cached and distinct else 0.0
    return computed_tokens(tokens, distinct, shared_paid=True, leading_cached=cached) / profile.unique


def _place(nodes: list[AINode], group: list[AINode], order: list[AINode]) -> list[AINode]:
    """Put the group's members, in `order`, into the positions the group occupied; then move any
    call nested in a member's arguments just before that member."""
    members = {id(n) for n in group}
    positions = [i for i, n in enumerate(nodes) if id(n) in members]
    placed = list(nodes)
    for position, node in zip(positions, order):
        placed[position] = node
    for member in order:
        nested = [n for n in placed if n is not member and n.location.select is member.location.select and _nested_in(n, member)]
        for inner in nested:
            if placed.index(inner) > placed.index(member):
                placed.remove(inner)
                placed.insert(placed.index(member), inner)
    return placed


def _nested_in(inner: AINode, outer: AINode) -> bool:
    call = find_bound_call(outer.location.select, outer.function_name)
    return call is not None and find_bound_call(call, inner.function_name) is not None
