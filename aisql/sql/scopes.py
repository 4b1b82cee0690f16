"""sqlglot's scopes of a statement, asked the questions binder and planner have.

A scope is a SELECT (or set operation, lateral, CTE body) with the sources its FROM clause
names; correlated subqueries and laterals see their enclosing scopes too. sqlglot builds the
tree (`sqlglot.optimizer.scope`); this wrapper finds the scope a node sits in and reads it.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.errors import OptimizeError
from sqlglot.optimizer.scope import Scope, ScopeType, traverse_scope


class QueryScopes:
    def __init__(self, ast: exp.Expression) -> None:
        self._by_expression: dict[int, Scope] = {}
        roots = [n for n in ast.walk() if isinstance(n, exp.Query) and _query_ancestor(n) is None]
        for root in roots:
            try:
                scopes = traverse_scope(root)
            except OptimizeError:
                continue  # a statement sqlglot cannot scope: callers fall back to what is written
            for scope in scopes:
                self._by_expression[id(scope.expression)] = scope

    def scope_of(self, node: exp.Expression) -> Scope | None:
        """The innermost scope `node` belongs to (its own, if `node` is a scope's expression)."""
        current: exp.Expression | None = node
        while current is not None:
            scope = self._by_expression.get(id(current))
            if scope is not None:
                return scope
            current = current.parent
        return None

    def visible_sources(self, node: exp.Expression) -> list[dict[str, exp.Expression]]:
        """Per enclosing scope, innermost first: source name -> its FROM item (a Table, a
        derived table, a CTE reference...)."""
        scope = self.scope_of(node.parent) if node.parent is not None else None
        chain = []
        while scope is not None:
            sources = {name: item for name, (item, _) in scope.selected_sources.items()}
            if sources:
                chain.append(sources)
            scope = scope.parent
        return chain

    def visible_ctes(self, select: exp.Expression) -> list[exp.CTE]:
        """The CTE definitions `select` may reference (inner ones shadow outer ones), in
        definition order."""
        scope = self.scope_of(select)
        if scope is None:
            return []
        found: dict[str, exp.CTE] = {}
        for name, cte_scope in scope.cte_sources.items():
            definition = cte_scope.expression.parent
            if isinstance(definition, exp.CTE):
                found[name.lower()] = definition
        return sorted(found.values(), key=_definition_order)


def depth(scope: Scope) -> int:
    """How many scopes enclose this one."""
    count, parent = 0, scope.parent
    while parent is not None:
        count, parent = count + 1, parent.parent
    return count


def describe(scope: Scope) -> str:
    """For plans: "query", "cte x", "derived table d", "subquery", "lateral", ..."""
    kind = scope.scope_type
    alias = scope.expression.parent.alias if scope.expression.parent is not None else ""
    if kind is ScopeType.CTE:
        return f"cte {alias}"
    if kind is ScopeType.DERIVED_TABLE:
        return f"derived table {alias}" if alias else "derived table"
    if kind is ScopeType.SUBQUERY:
        return "subquery"
    if kind is ScopeType.UDTF:
        return "lateral"
    if kind is ScopeType.SET_OPERATION:
        return "set operation branch"
    return "query"


def _query_ancestor(node: exp.Expression) -> exp.Expression | None:
    parent = node.parent
    while parent is not None:
        if isinstance(parent, exp.Query):
            return parent
        parent = parent.parent
    return None


def _definition_order(cte: exp.CTE) -> tuple[int, int]:
    """Outer WITH clauses first (inner CTEs may read outer ones, never the reverse), then
    position within the clause."""
    with_ = cte.parent
    nesting = 0
    node = with_
    while node is not None:
        nesting += 1
        node = node.parent
    return (nesting, with_.expressions.index(cte) if isinstance(with_, exp.With) else 0)
