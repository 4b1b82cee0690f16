"""A run's result as a notebook shows it: the rows as an HTML table (the first ROWS_SHOWN, as
DuckDB's own repr cuts them), the summary line, and the quality lines — warnings marked as
warnings, so a data person living in Jupyter sees the same verdict the CLI prints on stderr.

Written by hand (html.escape over the values) rather than through pandas: pandas is not a
dependency, and a table of strings needs nothing more.
"""

from __future__ import annotations

import html

import pyarrow as pa

ROWS_SHOWN = 20
CELL_CHARS = 200  # a longer value is cut, with an ellipsis: a notebook cell is not a file


def result_html(result) -> str:
    """QueryResult._repr_html_: rows, summary, warnings."""
    from aisql.executor.report.signals import quality_lines
    from aisql.executor.report.summary import summary_line

    parts = ['<div class="aisql-result">']
    if result.table is not None:
        parts.append(table_html(result.table))
    parts.append(f'<p class="aisql-summary" style="font-family:monospace">{html.escape(summary_line(result))}</p>')
    lines = quality_lines(result.stats)
    if lines:
        parts.append('<ul class="aisql-quality" style="font-family:monospace">')
        for line in lines:
            if line.warning:
                parts.append(f'<li class="aisql-warning" style="color:#b45309"><b>warning:</b> {html.escape(line.text)}</li>')
            else:
                parts.append(f"<li>{html.escape(line.text)}</li>")
        parts.append("</ul>")
    parts.append("</div>")
    return "\n".join(parts)


def table_html(table: pa.Table) -> str:
    head = "".join(f"<th>{html.escape(name)}</th>" for name in table.column_names)
    types = "".join(f'<th style="font-weight:normal;color:#6b7280">{html.escape(str(field.type))}</th>' for field in table.schema)
    rows = table.slice(0, ROWS_SHOWN).to_pylist()
    body = "".join("<tr>" + "".join(f"<td>{_cell(value)}</td>" for value in row.values()) + "</tr>" for row in rows)
    more = table.num_rows - len(rows)
    tail = f'<p style="font-family:monospace;color:#6b7280">{more:,} more row{"s" if more != 1 else ""} (QueryResult.table has them all)</p>' if more > 0 else ""
    return f'<table class="aisql-rows"><thead><tr>{head}</tr><tr>{types}</tr></thead><tbody>{body}</tbody></table>{tail}'


def _cell(value) -> str:
    if value is None:
        return '<span style="color:#9ca3af">NULL</span>'
    text = str(value)
    if len(text) > CELL_CHARS:
        text = text[:CELL_CHARS] + "…"
    return html.escape(text)
