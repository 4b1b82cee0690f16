"""Make DuckDB run a conjunction's AI calls only on rows that passed the conjuncts before them.

The plan prefetches an AI predicate for the rows that survive the plain filters (and the AI
predicates ordered before it) — and nothing else. DuckDB, however, is free to evaluate a
conjunction's parts in any order: over a file scan (CSV, JSON: no filter pushdown) DuckDB 2.0
puts a Python function *before* `rating <= 2`, so the final query would ask the model about rows
the filter throws away. We pin the order the plan chose with one CASE, which DuckDB evaluates
branch by branch on the rows still undecided:

    p1 AND p2 AND ai1(x) AND ai2(y)
      ->  p1 AND p2 AND CASE WHEN (p1 AND p2) IS NOT TRUE THEN FALSE
                             WHEN ai1(x) IS NOT TRUE THEN FALSE
                             ELSE ai2(y) END

The plain conjuncts stay at the top level too (DuckDB pushes them into scans and hash joins).
Each AI call appears once: repeated, DuckDB's common-subexpression rule would compute it below
the filter, on every row. In a filter (WHERE, ON, HAVING, QUALIFY) both forms keep exactly the
rows where every conjunct is TRUE.
Used on the final query (rule guard_filters) and on AI nodes' input queries (inputs.py), which
filter by the answers of AI predicates evaluated before.
A conjunction with a volatile function (random(), ...) is left alone (repeating it would change it).
"""

from __future__ import annotations

from sqlglot import exp

from aisql.planner.scope import bound_call_names

VOLATILE = {"RANDOM", "RAND", "UUID", "GEN_RANDOM_UUID", "SETSEED", "NEXTVAL", "CURRENT_TIMESTAMP", "NOW"}


def pin_conjunct_order(ast: exp.Expression, names: set[str]) -> bool:
    """Rewrite, in place, every filter (WHERE, HAVING, QUALIFY, JOIN ON) of `ast` whose conjunction
    has an AI call (one of `names`) after its first conjunct. True if anything changed."""
    changed = False
    for select in ast.find_all(exp.Select):
        for holder in filter_holders(select):
            key = "on" if isinstance(holder, exp.Join) else "this"
            cond = holder.args.get(key)
            if cond is None:
                continue
            conjuncts = split_conjuncts(cond)
            has_ai = [bool(bound_call_names(c, names)) for c in conjuncts]
            if not any(has_ai[1:]) or any(_volatile(c) for c in conjuncts):
                continue  # at most one AI conjunct, first: nothing can run before it
            plain = [c.copy() for c, ai in zip(conjuncts, has_ai) if not ai]
            ai_conjuncts = [c.copy() for c, ai in zip(conjuncts, has_ai) if ai]
            holder.set(key, exp.and_(*plain, _in_order(plain, ai_conjuncts)))
            changed = True
    return changed


def filter_holders(select: exp.Select):
    for key in ("where", "having", "qualify"):
        if select.args.get(key) is not None:
            yield select.args[key]
    for join in select.args.get("joins") or []:
        yield join


def split_conjuncts(cond: exp.Expression) -> list[exp.Expression]:
    """`a AND (b AND c)` -> [a, b, c]: sqlglot's flatten, also through parenthesised conjunctions."""
    cond = cond.unnest()
    if not isinstance(cond, exp.And):
        return [cond]
    return [conjunct for part in cond.flatten() for conjunct in split_conjuncts(part)]


def _in_order(plain: list[exp.Expression], ai_conjuncts: list[exp.Expression]) -> exp.Expression:
    """CASE WHEN (plain) IS NOT TRUE THEN FALSE WHEN ai1 IS NOT TRUE THEN FALSE ... ELSE ai_last END"""
    tests = ([exp.and_(*[c.copy() for c in plain])] if plain else []) + ai_conjuncts[:-1]
    ifs = [exp.If(this=exp.Not(this=exp.Is(this=exp.paren(t), expression=exp.true())), true=exp.false()) for t in tests]
    return exp.Case(ifs=ifs, default=ai_conjuncts[-1])


def _volatile(expression: exp.Expression) -> bool:
    return any(
        isinstance(f, exp.Rand)
        or f.sql_name().upper() in VOLATILE
        or (isinstance(f, exp.Anonymous) and f.name.upper() in VOLATILE)
        for f in expression.find_all(exp.Func)
    )
