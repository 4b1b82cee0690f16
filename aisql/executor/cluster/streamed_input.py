"""A node's input read from DuckDB a slice at a time, in anchor order, as prefix groups.

The non-streamed path (aisql.executor.sharded) reads a node's whole input, renders and encodes
every prompt on the driver and cuts prefix groups from token ids: memory and driver time grow
with the node. Here DuckDB orders the distinct argument tuples by the arguments that lead the
prompt (an AI join's anchor table first), and a record batch of SLICE_ROWS tuples at a time
becomes rendered texts grouped by those leading values — the prefix groups, formed from values
DuckDB already grouped, with no token id on the driver. A group cut by a slice's end is carried
into the next slice, so groups stay whole.

The driver renders (the result cache is keyed by the text, so a rerun or a single-engine run
finds the same answers) but never encodes: workers apply the chat template and tokenize.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Sequence

import duckdb

from aisql.sql.template import Template

SLICE_ROWS = 20_000  # tuples per record batch: bounds the driver's memory for the input
STREAM_AT = 50_000  # a node of this many distinct tuples or more streams (on a worker pool)


@dataclass
class StreamedGroup:
    """Consecutive distinct tuples sharing their leading values: texts with their row counts."""

    lead: tuple
    texts: list[str] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)  # input rows per text (tuples rendering alike are summed later)

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


def ordered_input_sql(input_sql: str, arity: int, lead: Sequence[int]) -> str:
    """The node's input (arity argument columns, then the row count) ordered so that a group's
    tuples are consecutive: leading arguments first, then the others in column order."""
    order = [i + 1 for i in lead] + [i + 1 for i in range(arity) if i not in lead]
    return f"SELECT * FROM ({input_sql}) AS node_input ORDER BY {', '.join(map(str, order)) or '1'}"


def count_input(con: duckdb.DuckDBPyConnection, input_sql: str) -> int:
    """The node's distinct tuples (what progress counts toward), without reading them."""
    return int(con.execute(f"SELECT count(*) FROM ({input_sql}) AS node_input").fetchall()[0][0])


def stream_groups(
    con: duckdb.DuckDBPyConnection, input_sql: str, template: Template, arity: int, lead: Sequence[int], counts: SliceCounts, slice_rows: int = SLICE_ROWS
) -> Iterator[list[StreamedGroup]]:
    """Slices of whole prefix groups, in order. `counts` is updated as rows are read."""
    reader = con.sql(ordered_input_sql(input_sql, arity, lead)).to_arrow_reader(slice_rows)
    carried: StreamedGroup | None = None
    for batch in reader:
        columns = [batch.column(i).to_pylist() for i in range(arity)]
        rows = batch.column(arity).to_pylist()
        groups: list[StreamedGroup] = []
        current = carried
        for values, count in zip(zip(*columns), rows):
            counts.rows_in += count
            if None in values:
                counts.null_rows += count
                continue  # NULL in, NULL out: never reaches the model
            key = tuple(values[i] for i in lead)
            if current is None or key != current.lead or len(current.texts) >= slice_rows:
                if current is not None:  # a group over a slice is cut in pieces: memory stays bounded
                    groups.append(current)
                current = StreamedGroup(key)
            current.texts.append(template.render(values))
            current.rows.append(count)
        carried = current
        if groups:
            yield groups
    if carried is not None:
        yield [carried]
