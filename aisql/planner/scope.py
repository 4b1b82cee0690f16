"""Where is each AI call? Its innermost SELECT, the clause of it, and how deep it is nested.

The clause decides which rows the call sees (the rows of FROM, those surviving WHERE, the groups
of GROUP BY...), and so how its input relation is derived and in which order nodes run.
"""

from __future__ import annotations

from sqlglot import exp

from aisql.planner.plan import Clause, Location, NodeRole
from aisql.sql.calls import AICall
from aisql.sql.scopes import QueryScopes, depth, describe

_CLAUSE_BY_KEY = {
    "where": Clause.WHERE,
    "group": Clause.GROUP,
    "having": Clause.HAVING,
    "expressions": Clause.SELECT,
    "qualify": Clause.QUALIFY,
    "order": Clause.ORDER,
}


def find_bound_call(root: exp.Expression, function_name: str) -> exp.Anonymous | None:
    """The bound call node named `function_name` under `root` (names are unique per run)."""
    wanted = function_name.upper()
    for node in root.find_all(exp.Anonymous):
        if node.name.upper() == wanted:
            return node
    return None


def bound_call_names(root: exp.Expression, names: set[str]) -> set[str]:
    """Which of `names` (upper-case) are called somewhere under `root`."""
    return {n.name.upper() for n in root.find_all(exp.Anonymous) if n.name.upper() in names}


def locate(ast: exp.Expression, call: AICall, all_names: set[str], scopes: QueryScopes | None = None) -> Location:
    """Where `call`'s bound call sits in `ast`; pass `scopes` (of `ast`) when locating several."""
    node = find_bound_call(ast, call.function_name)
    if node is None:  # pragma: no cover - the binder put it there
        raise AssertionError(f"bound call {call.function_name} not found")
    nesting = sum(1 for anc in _ancestors(node) if isinstance(anc, exp.Anonymous) and anc.name.upper() in all_names)
    select = node.find_ancestor(exp.Select)
    if select is None:
        return Location(select=None, clause=Clause.OTHER, nesting=nesting, scope_name=_statement_kind(ast))
    clause, join_index = _clause_of(node, select)
    scope = (scopes or QueryScopes(ast)).scope_of(select)
    return Location(
        select=select,
        clause=clause,
        join_index=join_index,
        scope_name=describe(scope) if scope is not None else "query",
        scope_rank=-depth(scope) if scope is not None else 0,
        nesting=nesting,
    )


def role_of(location: Location) -> NodeRole:
    if location.clause is Clause.JOIN:
        return NodeRole.JOIN
    if location.clause in (Clause.WHERE, Clause.HAVING, Clause.QUALIFY):
        return NodeRole.FILTER
    return NodeRole.PROJECT


def _clause_of(node: exp.Expression, select: exp.Select) -> tuple[Clause, int | None]:
    child = node
    path = [node]
    while child.parent is not select:
        child = child.parent
        path.append(child)
    key = child.arg_key
    if key == "joins":
        joins = select.args.get("joins") or []
        index = next(i for i, j in enumerate(joins) if j is child)
        # Inside the join's ON condition, or in its table expression (e.g. a table function)?
        inner = path[-2] if len(path) >= 2 else None
        if inner is not None and inner.arg_key == "on":
            return Clause.JOIN, index
        return Clause.OTHER, index
    return _CLAUSE_BY_KEY.get(key, Clause.OTHER), None


def _statement_kind(ast: exp.Expression) -> str:
    return type(ast).__name__.lower()


def _ancestors(node: exp.Expression):
    parent = node.parent
    while parent is not None:
        yield parent
        parent = parent.parent
