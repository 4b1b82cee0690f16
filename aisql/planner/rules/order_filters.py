"""Rule: write each conjunction of the final query in the order the plan evaluates it.

DuckDB evaluates a filter's conjuncts left to right on the rows that survived the previous ones
(it moves cheap comparisons first, and keeps functions of equal cost in written order). The plan
prefetched a later AI predicate only for rows that passed the earlier ones, so the final query
must ask in the same order: plain conjuncts first, then AI conjuncts in plan order. Otherwise
DuckDB would call the later predicate on rows the plan never prepared.
"""

from __future__ import annotations

import dataclasses

from sqlglot import exp

from aisql.planner.conjunct_order import filter_holders, split_conjuncts
from aisql.planner.context import PlanningContext
from aisql.planner.plan import Plan
from aisql.planner.scope import bound_call_names, locate
from aisql.sql.scopes import QueryScopes


def order_filters(plan: Plan, context: PlanningContext) -> Plan:
    if not plan.nodes:
        return plan
    position = {node.function_name.upper(): i for i, node in enumerate(plan.nodes)}
    names = set(position)
    ast = plan.final_ast.copy()
    changed = False
    for select in ast.find_all(exp.Select):
        for holder in filter_holders(select):
            cond = holder.args.get("on") if isinstance(holder, exp.Join) else holder.this
            if cond is None:
                continue
            conjuncts = split_conjuncts(cond)

            def rank(indexed):
                index, conjunct = indexed
                used = bound_call_names(conjunct, names)
                return (max(position[n] for n in used) if used else -1, index)

            ordered = [c for _, c in sorted(enumerate(conjuncts), key=rank)]
            if ordered != conjuncts:
                rebuilt = exp.and_(*[c.copy() for c in ordered])
                if isinstance(holder, exp.Join):
                    holder.set("on", rebuilt)
                else:
                    holder.set("this", rebuilt)
                changed = True
    if not changed:
        return plan
    return with_final_ast(plan, ast, names)


def with_final_ast(plan: Plan, ast: exp.Expression, names: set[str]) -> Plan:
    """`plan` with a rewritten final query: every node's location re-read from the new AST
    (keeping the order earlier rules chose)."""
    scopes = QueryScopes(ast)
    nodes = tuple(
        dataclasses.replace(
            n, location=dataclasses.replace(locate(ast, n.call, names, scopes), scope_rank=n.location.scope_rank)
        )
        for n in plan.nodes
    )
    return dataclasses.replace(plan, final_ast=ast, final_sql=ast.sql(dialect="duckdb", comments=False), nodes=nodes)
