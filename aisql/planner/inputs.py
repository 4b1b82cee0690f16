"""Derive an AI node's input relation: the rows its call sees, as one DuckDB query.

For a call in a SELECT, the input is that SELECT's FROM clause filtered by everything that must be
TRUE for the call's value to matter:

- in WHERE (or an inner join's ON): every *other* conjunct of WHERE and of the inner joins' ON
  conditions. If any of them is not TRUE the row is dropped whatever the call answers, so the
  input is exactly the rows on which naive execution needs an answer;
- in the ON of an outer join: the pairs of the join's left side and its table that satisfy the
  other ON conjuncts (WHERE may not be applied below an outer join);
- in the SELECT list, ORDER BY, QUALIFY: the rows surviving WHERE (and GROUP BY/HAVING when the
  prompt's arguments aggregate); in the SELECT list of a SELECT with ORDER BY ... LIMIT whose
  sort keys need no AI answer, only the rows whose sort keys are among the LIMIT's (`SELECT id,
  AI.EMBED(x) ... ORDER BY id LIMIT 3` embeds three rows, not the table). Rows tied with the last
  one kept are included, so whichever of them DuckDB's top-N keeps has its answer; the node is
  then `input_limited` and answers NULL, without asking, for rows the top-N drops anyway;
- in HAVING: the groups surviving the other HAVING conjuncts.

Conjuncts that call AI nodes not yet evaluated are dropped (the input becomes a superset: more
prompts, never wrong answers). The query returns the distinct argument tuples and how many input
rows share each one, which is what dedup and the token accounting need.
"""

from __future__ import annotations

from sqlglot import exp

from aisql.planner.conjunct_order import pin_conjunct_order, split_conjuncts
from aisql.planner.plan import ARG_PREFIX, COUNT_COLUMN, AINode, Clause
from aisql.planner.scope import bound_call_names, find_bound_call
from aisql.sql.scopes import QueryScopes

_DROP_FROM_INPUT = ("with_", "distinct", "order", "limit", "offset", "qualify", "sample", "locks", "into")


def build_input_sql(node: AINode, available: set[str], all_names: set[str]) -> tuple[str | None, bool]:
    """SQL of the node's distinct argument tuples, or None if it cannot be derived.

    `available`/`all_names` are upper-case bound call names: calls whose answers may be used in
    filters, and all calls of the statement. Returns (sql, dropped_filters): dropped_filters says
    the input is a superset because filters calling unavailable nodes were left out.
    """
    sql, dropped, _ = build_node_input(node, available, all_names)
    return sql, dropped


def build_node_input(node: AINode, available: set[str], all_names: set[str]) -> tuple[str | None, bool, bool]:
    """build_input_sql's (sql, dropped_filters), and whether the input covers only the rows an
    ORDER BY ... LIMIT keeps (the node may then answer NULL for the others without asking)."""
    select = node.location.select
    if select is None:
        return None, False, False
    blocked = (all_names - available) | {node.function_name.upper()}
    builder = _InputBuilder(select, node, blocked)
    query = builder.build()
    if query is None:
        return None, False, False
    if bound_call_names(query, blocked):
        return None, False, False  # e.g. a derived table or CTE whose AI answers are not known yet
    pin_conjunct_order(query, all_names)  # earlier AI predicates only on rows the plain filters keep
    names = [f"{ARG_PREFIX}{i}" for i in range(node.call.arity)]
    wrapper = exp.select(*names, exp.alias_(exp.func("count", exp.Star()), COUNT_COLUMN)).from_(
        exp.Subquery(this=query, alias=exp.TableAlias(this=exp.to_identifier("__aisql_input")))
    )
    wrapper = wrapper.group_by(*names)
    return wrapper.sql(dialect="duckdb", comments=False), builder.dropped, builder.limited


def ungrouped_input_sql(grouped_sql: str) -> str:
    """A node input's rows one by one (each with count 1) instead of its distinct tuples
    (`build_input_sql`'s GROUP BY): the same sums and distinct counts, but a count or a sample
    over it streams instead of building a hash table of every distinct tuple first (10^8 of a
    cross join: GBs)."""
    import sqlglot

    grouped = sqlglot.parse_one(grouped_sql, dialect="duckdb")
    rows = grouped.copy()
    rows.set("group", None)
    rows.set(
        "expressions",
        [e if e.alias_or_name != COUNT_COLUMN else exp.alias_(exp.Literal.number(1), COUNT_COLUMN) for e in grouped.expressions],
    )
    return rows.sql(dialect="duckdb", comments=False)


class _InputBuilder:
    def __init__(self, select: exp.Select, node: AINode, blocked: set[str]) -> None:
        self.original = select
        self.node = node
        self.blocked = blocked
        self.dropped = False  # a filter was dropped because it needs unknown AI answers
        self.self_name = node.function_name.upper()
        self.limited = False  # the input is the rows an ORDER BY ... LIMIT keeps (with ties)

    def build(self) -> exp.Select | None:
        query = self.original.copy()
        call = find_bound_call(query, self.node.function_name)
        if call is None:  # pragma: no cover
            return None
        args = [a.copy() for a in call.expressions]
        if any(self._blocked_in(a) for a in args):
            return None  # an AI call inside the prompt's arguments has no answers yet
        loc = self.node.location
        keep_limit = False
        joins = query.args.get("joins") or []
        all_inner = all(_is_inner(j) for j in joins)

        if loc.clause is Clause.JOIN and not all_inner:
            if not self._below_outer_join(query, joins, loc.join_index):
                return None
            items: list[exp.Expression] | None = []
        elif all_inner and joins and loc.clause in (Clause.WHERE, Clause.JOIN) and self._push_below_joins(query, args):
            items = []
        else:
            items, keep_limit = self._filtered_items(query, joins, args)
            if items is None:
                return None

        top = self._top_keys(query) if keep_limit and not self.dropped else None
        for key in _DROP_FROM_INPUT:
            query.set(key, None)
        if top is not None:
            query = query.where(top, copy=False)
            self.limited = True
        query.set("expressions", items + [exp.alias_(a, f"{ARG_PREFIX}{i}") for i, a in enumerate(args)])
        ctes = QueryScopes(self.original.root()).visible_ctes(self.original)
        if ctes:
            query = _attach_ctes(query, ctes)
        return query

    def _below_outer_join(self, query: exp.Select, joins: list[exp.Join], k: int) -> bool:
        """An AI call in the ON of outer join `k`: its input is that join made inner over the
        joins before it (rewrites `query`); False where a join before it cannot be kept."""
        kept = []
        for join in joins[:k]:
            if not self._filter_join(join):
                return False
            kept.append(join)
        target = joins[k]
        preserves_left = (target.args.get("side") or "").upper() in ("", "LEFT")
        target.set("side", None)
        if target.args.get("kind") not in (None, "", "INNER"):
            target.set("kind", None)
        target.set("on", self._strip(target.args.get("on")) or exp.true())
        kept.append(target)
        query.set("joins", kept)
        # WHERE cannot go below an outer join, except conjuncts on the join's left side alone
        # when the join keeps left rows as they are (LEFT or INNER): a left row failing them is
        # dropped with everything joined to it, whatever the call answers.
        pushed = self._left_side_conjuncts(query, k) if preserves_left else []
        query.set("where", exp.Where(this=exp.and_(*pushed)) if pushed else None)
        self._drop_grouping(query)
        return True

    def _filtered_items(self, query: exp.Select, joins: list[exp.Join], args: list[exp.Expression]) -> tuple[list[exp.Expression] | None, bool]:
        """The query's own filters less the calls without answers (rewrites `query`), and the
        select items the input keeps: (items or None where it cannot be derived, whether the
        statement's LIMIT applies to it)."""
        loc = self.node.location
        for join in joins:
            if not self._filter_join(join):
                return None, False
        where = query.args.get("where")
        if where is not None:
            cond = self._strip(where.this)
            query.set("where", exp.Where(this=cond) if cond is not None else None)
        grouped = loc.clause is Clause.HAVING or (loc.clause in (Clause.SELECT, Clause.ORDER, Clause.QUALIFY) and needs_grouping(args, query))
        if not grouped:
            keep_limit = self._limit_applies(query)
            self._drop_grouping(query)
            return self._row_items(query.expressions), keep_limit
        having = query.args.get("having")
        cond = self._strip(having.this) if having is not None else None
        query.set("having", exp.Having(this=cond) if cond is not None else None)
        if query.args.get("group") is not None and self._blocked_in(query.args["group"]):
            return None, False
        return self._grouped_items(query.expressions), False

    def _push_below_joins(self, query: exp.Select, args: list[exp.Expression]) -> bool:
        """An AI predicate of an inner-join conjunction that reads only some of the tables runs
        on those tables' rows alone (as DuckDB pushes such a filter below the joins), filtered by
        the conjuncts that read only them. Rewrites `query` and returns True if it applies."""
        tables = _qualifiers(args)
        if tables is None:
            return False
        from_ = query.args["from_"]
        items = [from_.this] + [j.this for j in query.args["joins"]]
        kept = [item for item in items if item.alias_or_name.lower() in tables]
        if len(kept) == len(items) or not kept:
            return False
        conjuncts = []
        where = query.args.get("where")
        for cond in [j.args.get("on") for j in query.args["joins"]] + [where.this if where is not None else None]:
            if cond is not None:
                conjuncts.extend(split_conjuncts(cond))
        filters = []
        for conjunct in conjuncts:
            names = bound_call_names(conjunct, self.blocked)
            if names:
                if names != {self.self_name}:
                    self.dropped = True
                continue
            used = _qualifiers([conjunct])
            if used is not None and used <= tables and conjunct.find(exp.Subquery) is None:
                filters.append(conjunct)
        query.set("from_", exp.From(this=kept[0]))
        query.set("joins", [exp.Join(this=item, kind="CROSS") for item in kept[1:]])
        query.set("where", exp.Where(this=exp.and_(*filters)) if filters else None)
        self._drop_grouping(query)
        return True

    def _left_side_conjuncts(self, query: exp.Select, k: int) -> list[exp.Expression]:
        where = query.args.get("where")
        if where is None:
            return []
        from_ = query.args.get("from_")
        items = ([from_.this] if from_ is not None else []) + [j.this for j in (query.args.get("joins") or [])[:k]]
        left = {item.alias_or_name.lower() for item in items}
        pushed = []
        for conjunct in split_conjuncts(where.this):
            columns = list(conjunct.find_all(exp.Column))
            if self._blocked_in(conjunct) or conjunct.find(exp.Subquery) is not None:
                continue
            if all(c.table and c.table.lower() in left for c in columns):
                pushed.append(conjunct)
        return pushed

    def _grouped_items(self, items: list[exp.Expression]) -> list[exp.Expression] | None:
        """The SELECT list as written, so GROUP BY ALL / positions / aliases keep their meaning.

        An item calling an unevaluated AI node becomes NULL when it aggregates (it cannot be a
        group key, so grouping is unchanged); a group key that needs one makes the input underivable.
        """
        kept = []
        for item in items:
            if not self._blocked_in(item):
                kept.append(item)
            elif _aggregates(item):
                kept.append(exp.alias_(exp.null(), item.alias) if item.alias else exp.null())
            else:
                return None
        return kept

    def _row_items(self, items: list[exp.Expression]) -> list[exp.Expression]:
        """Per-row SELECT items (kept so WHERE may use their aliases, as DuckDB allows)."""
        kept = []
        for item in items:
            if _aggregates(item) or item.find(exp.Window) is not None:
                continue
            if self._blocked_in(item):
                kept.append(exp.alias_(exp.null(), item.alias) if item.alias else exp.null())
            else:
                kept.append(item)
        return kept

    def _limit_applies(self, query: exp.Select) -> bool:
        """A call in the SELECT list of a SELECT whose ORDER BY ... LIMIT picks its rows without
        AI answers: only those rows need the call's value. Not with DISTINCT, QUALIFY, grouping,
        aggregates or windows (they see every row's value), nor an ORDER BY over AI answers, by
        position or by a SELECT alias (the sort keys are recomputed over the FROM clause)."""
        if self.node.location.clause is not Clause.SELECT or not isinstance(query.args.get("limit"), exp.Limit):
            return False
        if query.args.get("order") is None or not isinstance(query.args["limit"].expression, exp.Literal):
            return False
        if any(query.args.get(key) is not None for key in ("distinct", "qualify", "group", "having")):
            return False
        if any(_aggregates(e) or e.find(exp.Window) is not None for e in query.expressions):
            return False
        aliases = {e.alias.lower() for e in query.expressions if e.alias}
        for ordered in query.args["order"].expressions:
            key = ordered.this
            if isinstance(key, exp.Literal) or self._blocked_in(key) or key.find(exp.AggFunc, exp.Window, exp.Subquery) is not None:
                return False
            if any(not column.table and column.name.lower() in aliases for column in key.find_all(exp.Column)):
                return False
        offset = query.args.get("offset")
        return offset is None or isinstance(offset.expression, exp.Literal)

    def _top_keys(self, query: exp.Select) -> exp.Expression:
        """`EXISTS (the LIMIT's sort-key tuples, equal to this row's)`: the rows of `query`
        (its ORDER BY / LIMIT / OFFSET still set) whose sort keys are among those the LIMIT keeps,
        ties with the last one included (NULL keys match NULL keys, as ORDER BY groups them)."""
        order = query.args["order"]
        keys = [ordered.this.copy() for ordered in order.expressions]
        top = query.copy()
        top.set("expressions", [exp.alias_(key, f"__aisql_k{i}") for i, key in enumerate(keys)])
        top.set("order", order.copy())
        matches = [
            exp.NullSafeEQ(this=exp.column(f"__aisql_k{i}", table="__aisql_top"), expression=key.copy()) for i, key in enumerate(keys)
        ]
        return exp.Exists(
            this=exp.select("1").from_(exp.Subquery(this=top, alias=exp.TableAlias(this=exp.to_identifier("__aisql_top")))).where(exp.and_(*matches))
        )

    def _filter_join(self, join: exp.Join) -> bool:
        """Strip unavailable AI conjuncts from an inner join's ON; outer joins must be complete."""
        on = join.args.get("on")
        if on is None:
            return True
        if _is_inner(join):
            join.set("on", self._strip(on) or exp.true())
            return True
        return not self._blocked_in(on)

    def _strip(self, cond: exp.Expression | None) -> exp.Expression | None:
        """`cond` without the conjuncts that call this node or nodes not evaluated yet."""
        if cond is None:
            return None
        kept = []
        for conjunct in split_conjuncts(cond):
            names = bound_call_names(conjunct, self.blocked)
            if not names:
                kept.append(conjunct)
            elif names != {self.self_name}:
                self.dropped = True  # the input is now a superset of what naive evaluation needs
        return exp.and_(*kept) if kept else None

    def _blocked_in(self, expression: exp.Expression) -> bool:
        return bool(bound_call_names(expression, self.blocked))

    @staticmethod
    def _drop_grouping(query: exp.Select) -> None:
        query.set("group", None)
        query.set("having", None)


def _qualifiers(expressions: list[exp.Expression]) -> set[str] | None:
    """Table aliases the expressions' columns name; None if any column is unqualified."""
    tables: set[str] = set()
    for expression in expressions:
        for column in expression.find_all(exp.Column):
            if not column.table:
                return None
            tables.add(column.table.lower())
    return tables


def _is_inner(join: exp.Join) -> bool:
    side = (join.args.get("side") or "").upper()
    kind = (join.args.get("kind") or "").upper()
    return not side and kind in ("", "INNER", "CROSS")


def needs_grouping(args: list[exp.Expression], query: exp.Select) -> bool:
    """Do the prompt's arguments aggregate (or window over groups)? Then the input is per group."""
    for arg in args:
        if _aggregates(arg):
            return True
        if query.args.get("group") is not None and arg.find(exp.Window) is not None:
            return True
    return False


def _aggregates(expression: exp.Expression) -> bool:
    """Does `expression` contain an aggregate function that is not a window function?"""
    return any(agg.find_ancestor(exp.Window) is None for agg in expression.find_all(exp.AggFunc))


def _attach_ctes(query: exp.Select, ctes: list[exp.CTE]) -> exp.Select:
    """Give `query` the CTEs it (transitively) references, in definition order."""
    needed: set[str] = set()
    frontier = [query]
    by_name = {c.alias.lower(): c for c in ctes}
    while frontier:
        current = frontier.pop()
        for table in current.find_all(exp.Table):
            name = table.name.lower()
            if name in by_name and name not in needed and not table.args.get("db"):
                needed.add(name)
                frontier.append(by_name[name].this)
    if not needed:
        return query
    chosen = [c.copy() for c in ctes if c.alias.lower() in needed]
    recursive = any(
        isinstance(c.parent, exp.With) and c.parent.args.get("recursive") for c in ctes if c.alias.lower() in needed
    )
    query.set("with_", exp.With(expressions=chosen, recursive=recursive or None))
    return query
