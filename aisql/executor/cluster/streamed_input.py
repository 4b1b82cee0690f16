"""A node's input read from DuckDB a slice at a time, in anchor order, as prefix groups.

The non-streamed path (aisql.executor.cluster.sharded) reads a node's whole input, renders and encodes
every prompt on the driver and cuts prefix groups from token ids: memory and driver time grow
with the node. Here the input is read in ranges of its leading column (an AI join's anchor),
each about SLICE_ROWS distinct tuples (slice_ranges): DuckDB groups and orders one range at a
time by the arguments that lead the prompt, and a record batch at a time becomes rendered texts
grouped by those leading values — the prefix groups, formed from values DuckDB already grouped,
with no token id on the driver. A group cut by a batch's end is carried into the next, so
groups stay whole (one larger than a slice is cut, to bound memory).

The driver renders (the result cache is keyed by the text, so a rerun or a single-engine run
finds the same answers) but never encodes: workers apply the chat template and tokenize.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Sequence

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aisql.sql.template import Template

SLICE_ROWS = 20_000  # tuples per record batch: bounds the driver's memory for the input
STREAM_AT = 50_000  # a node of this many distinct prompts or more streams (on a worker pool)
SKETCH_MARGIN = 0.10  # a sketched count this close to STREAM_AT (relative) is counted exactly
LEAD_SAMPLE = 4096  # leading values sampled to cut the input into ranges
TUPLE_HASH_COLUMN = "__aisql_tuple_hash"


@dataclass
class StreamedGroup:
    """Consecutive distinct tuples sharing their leading values: texts with their row counts."""

    lead: tuple
    texts: list[str] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)  # input rows per text (tuples rendering alike are summed later)
    hashes: list[int] | None = None  # per text: DuckDB's hash() of its tuple (the final query's key), if read

    @property
    def weight(self) -> float:
        """Characters the model reads for the group: its lead once, the rest per prompt (a token
        estimate up to a constant, which balancing does not need)."""
        lead = sum(len(str(v)) for v in self.lead)
        return lead + sum(len(t) - lead for t in self.texts) + len(self.texts)


@dataclass
class SliceCounts:
    rows_in: int = 0  # input rows, NULL tuples included
    null_rows: int = 0


def leading_args(template: Template, anchor_args: Sequence[int]) -> tuple[int, ...]:
    """The arguments a prefix group shares: an AI join's anchor arguments, else the argument
    that opens the prompt (its first placeholder)."""
    if anchor_args:
        return tuple(anchor_args)
    return (template.slots[0],) if template.slots else ()


def ordered_input_sql(input_sql: str, arity: int, lead: Sequence[int], where: str = "") -> str:
    """The node's input (arity argument columns, the row count, then each tuple's DuckDB hash:
    aisql.executor.node.tuple_hashes) ordered so that a group's tuples are consecutive: leading
    arguments first, then the others in column order."""
    from aisql.planner.plan import ARG_PREFIX

    order = [i + 1 for i in lead] + [i + 1 for i in range(arity) if i not in lead]
    hashed = f"hash({', '.join(f'{ARG_PREFIX}{i}' for i in range(arity))})" if arity else "0::UBIGINT"
    return f"SELECT *, {hashed} AS {TUPLE_HASH_COLUMN} FROM ({input_sql}) AS node_input{where} ORDER BY {', '.join(map(str, order)) or '1'}"


def slice_ranges(con: duckdb.DuckDBPyConnection, input_sql: str, lead: Sequence[int], total: int, slice_rows: int) -> list[tuple[str, list]]:
    """WHERE clauses (with their parameters) cutting the node's input into ranges of its first
    leading column, about `slice_rows` distinct tuples each, in order, NULLs last.

    Why ranges: DuckDB groups and orders a whole input before its first row comes out — for a
    1M-pair join, ~600 MB inside the driver. A range of the anchor column is pushed down to the
    anchor table's scan, so each range's query groups and orders only its own rows. The cuts come
    from a reservoir sample of the column over the input's rows as they stream (no hash table)."""
    if total <= slice_rows or not lead:
        return [("", [])]
    from aisql.planner.inputs import ungrouped_input_sql
    from aisql.planner.plan import ARG_PREFIX

    column = f"{ARG_PREFIX}{lead[0]}"
    rows_sql = ungrouped_input_sql(input_sql)
    try:
        picked = con.execute(
            f"SELECT {column} FROM ({rows_sql}) AS q WHERE {column} IS NOT NULL USING SAMPLE reservoir({LEAD_SAMPLE} ROWS) REPEATABLE (7)"
        ).fetchall()
    except duckdb.InterruptException:
        raise KeyboardInterrupt from None
    except duckdb.Error:  # an input the row-by-row rewrite cannot take: one range (DuckDB orders it all)
        return [("", [])]
    values = sorted(row[0] for row in picked)
    slices = -(-total // slice_rows)
    cuts = sorted({values[len(values) * i // slices] for i in range(1, slices)} - {values[0]} if values else set())
    ranges: list[tuple[str, list]] = []
    low = None
    for cut in cuts + [None]:
        conditions, params = [], []
        if low is not None:
            conditions.append(f"{column} >= ?")
            params.append(low)
        if cut is not None:
            conditions.append(f"{column} < ?")
            params.append(cut)
        ranges.append((" WHERE " + " AND ".join(conditions) if conditions else f" WHERE {column} IS NOT NULL", params))
        low = cut
    ranges.append((f" WHERE {column} IS NULL", []))
    return ranges


def count_input(con: duckdb.DuckDBPyConnection, input_sql: str, arity: int) -> int:
    """About how many distinct prompts (non-NULL tuples) the node has — whether it streams, how
    many ranges it is read in, what progress counts toward: a HyperLogLog sketch over its rows as
    they stream (counting them all exactly would build the hash table of every tuple that slicing
    avoids). Near STREAM_AT, where the sketch's few percent could decide either way (48,052 for
    50,000), they are counted exactly, so `streams` is exact at its threshold — and explain, which
    calls this too, says what the run does."""
    from aisql.planner.inputs import ungrouped_input_sql
    from aisql.planner.plan import ARG_PREFIX

    names = [f"{ARG_PREFIX}{i}" for i in range(arity)]
    not_null = " AND ".join(f"{name} IS NOT NULL" for name in names) or "TRUE"
    exact = f"SELECT count(*) FROM ({input_sql}) AS node_input WHERE {not_null}"
    try:
        if names:
            sketch = f"SELECT approx_count_distinct(hash({', '.join(names)})) FILTER (WHERE {not_null}) FROM ({ungrouped_input_sql(input_sql)}) AS node_rows"
            estimate = int(con.execute(sketch).fetchall()[0][0] or 0)
            if abs(estimate - STREAM_AT) > SKETCH_MARGIN * STREAM_AT:
                return estimate
        return int(con.execute(exact).fetchall()[0][0])
    except duckdb.InterruptException:
        raise KeyboardInterrupt from None
    except duckdb.Error:  # an input the row-by-row rewrite cannot take: counted exactly
        return int(con.execute(exact).fetchall()[0][0])


def streams(distinct_prompts: int | float | None) -> bool:
    """Whether a node of this many distinct prompts streams through a worker pool: the one rule
    the run (aisql.executor.node.node_runtime) and explain --workers share."""
    return bool(distinct_prompts) and distinct_prompts >= STREAM_AT


def stream_groups(
    con: duckdb.DuckDBPyConnection,
    input_sql: str,
    template: Template,
    arity: int,
    lead: Sequence[int],
    counts: SliceCounts,
    slice_rows: int | None = None,
    total: int = 0,
) -> Iterator[list[StreamedGroup]]:
    """Slices of whole prefix groups, in order. `counts` is updated as rows are read. `total`
    (the node's distinct tuples) decides how many ranges the input is read in (slice_ranges).
    A record batch is handled by Arrow kernels (rendering, NULL rows, where the leading values
    change), not row by row in Python: this runs for every prompt of a node of millions."""
    slice_rows = slice_rows or SLICE_ROWS
    carried: StreamedGroup | None = None
    for batch in _batches(con, input_sql, arity, lead, total, slice_rows):
        args = [batch.column(i) for i in range(arity)]
        row_counts, hashes = batch.column(arity), batch.column(arity + 1)
        counts.rows_in += pc.sum(row_counts).as_py() or 0
        if any(a.null_count for a in args):  # NULL in, NULL out: never reaches the model
            valid = pc.and_kleene(*[pc.is_valid(a) for a in args]) if len(args) > 1 else pc.is_valid(args[0])
            counts.null_rows += pc.sum(pc.filter(row_counts, pc.invert(valid))).as_py() or 0
            args = [pc.filter(a, valid) for a in args]
            row_counts, hashes = pc.filter(row_counts, valid), pc.filter(hashes, valid)
        size = len(row_counts)
        if not size:
            continue
        texts = render_column(template, args).to_pylist()
        rows, tuple_hashes = row_counts.to_pylist(), hashes.to_pylist()
        groups: list[StreamedGroup] = []
        current = carried
        for start, end, key in _lead_runs([args[i] for i in lead], size):
            while start < end:
                if current is None or key != current.lead or len(current.texts) >= slice_rows:
                    if current is not None:  # a group over a slice is cut in pieces: memory stays bounded
                        groups.append(current)
                    current = StreamedGroup(key, hashes=[])
                stop = min(end, start + slice_rows - len(current.texts))
                current.texts += texts[start:stop]
                current.rows += rows[start:stop]
                current.hashes += tuple_hashes[start:stop]
                start = stop
        carried = current
        if groups:
            yield groups
    if carried is not None:
        yield [carried]


def render_column(template: Template, args: Sequence[pa.Array]) -> pa.Array:
    """Template.render of every row, by Arrow's string concatenation (the same bytes: literal
    parts and VARCHAR values joined, nothing escaped or converted). Rows must have no NULL."""
    pieces: list = []
    for i, part in enumerate(template.parts):
        if part:
            pieces.append(pa.scalar(part, pa.string()))
        if i < len(template.slots):
            pieces.append(args[template.slots[i]])
    size = len(args[0]) if args else 0
    if not any(isinstance(p, (pa.Array, pa.ChunkedArray)) for p in pieces):
        return pa.array([template.render(())] * size, pa.string())
    if len(pieces) == 1:
        return pieces[0]
    return pc.binary_join_element_wise(*pieces, "")


def _lead_runs(lead_columns: Sequence[pa.Array], size: int) -> Iterator[tuple[int, int, tuple]]:
    """(start, end, leading values) of each run of equal leading values in a batch."""
    if not lead_columns:
        yield 0, size, ()
        return
    change = None
    for column in lead_columns:
        differs = pc.not_equal(column.slice(1), column.slice(0, size - 1))
        change = differs if change is None else pc.or_(change, differs)
    starts = [0] + [int(i) + 1 for i in np.flatnonzero(change.to_numpy(zero_copy_only=False))] if size > 1 else [0]
    keys = list(zip(*[pc.take(column, pa.array(starts)).to_pylist() for column in lead_columns]))
    for start, end, key in zip(starts, starts[1:] + [size], keys):
        yield start, end, key


def _batches(con, input_sql: str, arity: int, lead: Sequence[int], total: int, slice_rows: int):
    """Record batches of the ordered input, range by range."""
    for where, params in slice_ranges(con, input_sql, lead, total, slice_rows):
        yield from con.sql(ordered_input_sql(input_sql, arity, lead, where), params=params).to_arrow_reader(slice_rows)
