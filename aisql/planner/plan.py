"""Plan objects: what runs where, in which order, and what each AI node reads.

A `Plan` covers one statement. Its relational part is `final_sql` (the user's statement with every
AI call replaced by a bound call, run by DuckDB at the end). Each `AINode` is one AI call: how it
gets its answers (`strategy`), the SQL that computes its input rows (`input_sql`: the distinct
argument tuples it will see, with plain filters and earlier AI predicates already applied), and the
nodes it must wait for. Frozen dataclasses: rules return new plans, `explain()` walks them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from sqlglot import exp

from aisql.sql.calls import AICall


class NodeRole(enum.Enum):
    """What the AI call does to rows: filter them, join them, or compute a column."""

    FILTER = "AIFilter"
    JOIN = "AIJoin"
    PROJECT = "AIProject"


class Strategy(enum.Enum):
    PREFETCH = "prefetch"  # distinct inputs computed up front, evaluated as planned batches
    STREAMING = "streaming"  # evaluated inside the final query, one deduplicated batch per vector


class Clause(enum.Enum):
    JOIN = "join"
    WHERE = "where"
    GROUP = "group"
    HAVING = "having"
    SELECT = "select"
    QUALIFY = "qualify"
    ORDER = "order"
    OTHER = "other"

    @property
    def rank(self) -> int:
        """Order in which a SELECT's clauses see rows; AI calls in earlier clauses run first."""
        return list(Clause).index(self)


ARG_PREFIX = "__aisql_a"  # input_sql column names: __aisql_a0, __aisql_a1, ...
COUNT_COLUMN = "__aisql_n"  # input_sql: how many input rows share the tuple


@dataclass(frozen=True)
class Location:
    """Where a bound call sits: its innermost SELECT and the clause of it."""

    select: exp.Select | None
    clause: Clause
    join_index: int | None = None  # for Clause.JOIN
    scope_name: str = "query"  # human-readable: "query", "cte x", "subquery", ...
    scope_rank: int = 0  # inner scopes (CTEs, derived tables, subqueries) rank lower
    nesting: int = 0  # how many AI calls enclose this one (inner calls run first)


@dataclass(frozen=True)
class AINode:
    call: AICall
    role: NodeRole
    location: Location
    strategy: Strategy = Strategy.PREFETCH
    input_sql: str | None = None  # distinct argument tuples + counts, given the nodes before it
    estimate_sql: str | None = None  # the same with no AI answers known (for explain: no model)
    estimate_is_upper_bound: bool = False  # AI predicates were dropped from estimate_sql's filters
    depends_on: tuple[str, ...] = ()
    note: str = ""  # why streaming, or what the input covers
    anchor: str | None = None  # AI joins: the table whose rows are the outer loop
    anchor_args: tuple[int, ...] = ()  # the arguments read from the anchor table
    stop_after: int | None = None  # evaluate in chunks until this many rows qualify (LIMIT, no ORDER BY)
    input_limited: bool = False  # input_sql holds only the rows an ORDER BY ... LIMIT keeps: others answer NULL unasked

    @property
    def id(self) -> str:
        return self.call.id

    @property
    def function_name(self) -> str:
        return self.call.function_name

    @property
    def first_chunk(self) -> int:
        """A node that stops at a LIMIT (stop_after k): prompts asked before the first check —
        2k, at least 16 —, then doubling. The executor runs it; the cost model counts it."""
        return max(16, 2 * (self.stop_after or 0))


@dataclass(frozen=True)
class Plan:
    statement_sql: str  # the user's statement as written
    final_sql: str  # what DuckDB runs at the end
    final_ast: exp.Expression = field(repr=False, compare=False)
    nodes: tuple[AINode, ...] = ()  # in execution order

    def node(self, node_id: str) -> AINode:
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise KeyError(node_id)

    @property
    def is_relational_only(self) -> bool:
        return not self.nodes
