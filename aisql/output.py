"""Results out: files by suffix (written atomically), or stdout as a table, CSV or JSON.

Files are written by DuckDB's COPY, so CSV/Parquet/JSON look exactly as DuckDB users expect. The
target path only ever holds a complete file: we write a temporary file beside it and rename.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
import shutil
import sys
import tempfile
from pathlib import Path

import duckdb
import pyarrow as pa
from rich.console import Console
from rich.table import Table

from aisql.json_values import json_safe
from aisql.console import escape, stderr
from aisql.errors import DataError
from aisql.paths import process_alive

FILE_FORMATS = {".csv": "csv", ".parquet": "parquet", ".json": "json"}


def check_output_path(path: str | os.PathLike) -> Path:
    """Fail before any work if the output cannot be written."""
    target = Path(path)
    if target.suffix.lower() not in FILE_FORMATS:
        raise DataError(f"cannot tell the output format of {target}: use a .csv, .parquet or .json file name")
    return check_text_path(target, "output")


def check_text_path(path: str | os.PathLike, what: str = "output") -> Path:
    """Fail before any work if a file cannot be written at `path` (its directory exists and is
    writable, it is not a directory)."""
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.exists():
        raise DataError(f"{what} directory {parent} does not exist")
    if target.is_dir():
        raise DataError(f"{what} path {target} is a directory")
    if not os.access(parent, os.W_OK):
        raise DataError(f"{what} directory {parent} is not writable")
    remove_stale_temporaries(target)
    return target


def remove_stale_temporaries(target: Path) -> None:
    """Temporary files of earlier writes to `target` whose process is gone (killed mid-write)."""
    for stale in target.parent.glob(f".{target.name}.*.tmp"):
        pid = stale.name[len(target.name) + 2 : -len(".tmp")]
        if pid.isdigit() and not process_alive(int(pid)):
            try:
                stale.unlink()
            except OSError:
                pass


def write_table(table: pa.Table, path: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
    target = check_output_path(path)
    fmt = FILE_FORMATS[target.suffix.lower()]
    if fmt == "json":
        text, replaced = json_text(table)
        write_text_atomically(target, text)
        _say_replaced(replaced)
        return
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    options = {"csv": "FORMAT csv, HEADER true", "json": "FORMAT json, ARRAY true", "parquet": "FORMAT parquet"}[fmt]
    if fmt == "parquet" and metadata:
        pairs = ", ".join(f"{_literal(k)}: {_literal(v)}" for k, v in metadata.items())
        options += f", KV_METADATA {{{pairs}}}"
    con = duckdb.connect()
    try:
        con.register("__aisql_result", table)
        con.execute(f"COPY __aisql_result TO {_literal(str(temporary))} ({options})")
        replace_durably(temporary, target)
    except duckdb.Error as err:
        raise DataError(f"cannot write {target}: {str(err).splitlines()[0]}") from None
    finally:
        con.close()
        if temporary.exists():
            temporary.unlink()


def write_text_atomically(path: str | os.PathLike, text: str) -> None:
    target = check_text_path(path)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(text, encoding="utf-8")
        replace_durably(temporary, target)
    except OSError as err:
        raise DataError(f"cannot write {target}: {err.strerror or err}") from None
    finally:
        if temporary.exists():
            temporary.unlink()


def replace_durably(temporary: Path, target: Path) -> None:
    """Flush the finished file to disk, then rename it over the target: after a crash or power
    loss the target holds the old file or the new one, never part of one."""
    with open(temporary, "rb") as f:
        os.fsync(f.fileno())
    os.replace(temporary, target)
    try:
        directory = os.open(target.parent, os.O_RDONLY)
    except OSError:
        return  # platforms without directory handles
    try:
        os.fsync(directory)
    except OSError:
        pass
    finally:
        os.close(directory)


def print_table(table: pa.Table, console: Console, *, max_rows: int) -> None:
    view = Table(show_lines=False)
    for field in table.schema:
        numeric = pa.types.is_integer(field.type) or pa.types.is_floating(field.type) or pa.types.is_decimal(field.type)
        view.add_column(field.name, justify="right" if numeric else "left", overflow="fold")
    for row in table.slice(0, max_rows).to_pylist():
        view.add_row(*["[dim]NULL[/dim]" if v is None else _escape(str(v)) for v in row.values()])
    console.print(view)
    if table.num_rows > max_rows:
        console.print(f"[dim]… {table.num_rows - max_rows} more rows (use --max-rows, --format csv or --output)[/dim]")


def print_csv(table: pa.Table) -> None:
    """CSV on stdout, byte for byte what --output x.csv writes (DuckDB's COPY)."""
    with tempfile.TemporaryDirectory(prefix="aisql-") as directory:
        path = Path(directory) / "result.csv"
        write_table(table, path)
        sys.stdout.flush()
        with path.open("rb") as f:
            shutil.copyfileobj(f, sys.stdout.buffer)
        sys.stdout.buffer.flush()


def print_json(table: pa.Table) -> None:
    text, replaced = json_text(table)
    sys.stdout.write(text)
    _say_replaced(replaced)


def json_text(table: pa.Table) -> tuple[str, int]:
    """The rows as one JSON array, as `--format json` prints them and `--output x.json` writes
    them (one rendering: the file is what the terminal showed); how many values were replaced."""
    rows, replaced = json_safe(table.to_pylist())
    return json.dumps(rows, default=str, ensure_ascii=False, indent=2, allow_nan=False) + "\n", replaced


def print_json_line(document: dict) -> None:
    """One JSON document on one line (JSON Lines), for one of several results."""
    document, replaced = json_safe(document)
    sys.stdout.write(json.dumps(document, default=str, ensure_ascii=False, allow_nan=False) + "\n")
    _say_replaced(replaced)


def _say_replaced(replaced: int) -> None:
    if replaced:
        stderr.print(f"[yellow]note: {replaced:,} non-finite number(s) (NaN or Infinity, which JSON cannot hold) written as null[/yellow]")


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _escape(text: str) -> str:
    return text.replace("[", r"\[")


# ---- a run's result out: rows, notes, summary ---------------------------------------------------
@dataclass
class ResultPrinter:
    """How `aisql run` and `aisql shell` put a result out, in one place: rows on stdout (a table,
    CSV or JSON) or into files, the model's note and approximate mode's label beside the rows
    (never inside CSV/JSON data), the run's notes, summary and warnings on stderr.

    `interactive` (the shell): one statement at a time — only statements that return rows are
    printed (JSON: one `{"rows": ...}` line each), and the summary only when AI calls ran."""

    fmt: str = "table"  # table | csv | json
    max_rows: int = 50
    output: str | None = None  # one file for the last result
    output_all: str | None = None  # a directory: every result as statement_N.parquet
    stats_json: str | None = None
    quiet: bool = False
    interactive: bool = False

    def check_paths(self) -> None:
        """Every path written after the run is checked before it: no paid work is lost."""
        if self.output:
            check_output_path(self.output)
        if self.output_all:
            Path(self.output_all).mkdir(parents=True, exist_ok=True)
            check_text_path(Path(self.output_all) / "statement_1.parquet", "--output-all")
        if self.stats_json:
            check_text_path(self.stats_json, "--stats-json")

    def emit(self, result) -> None:
        """Rows, notes and summary of one run (an aisql.executor.query.QueryResult)."""
        if self.interactive:
            self._emit_statements(result)
            return
        fmt, table, stats = self.fmt, result.table, result.stats
        note = run_note(result, self.quiet)
        metadata = {"aisql_model": result.model.name} if result.model else {}
        if note:
            metadata["aisql_note"] = note  # files carry the label as printed rows do
        # The note goes wherever the answers go: under a printed table, else to stderr (never
        # into CSV/JSON data).
        note_under_table = table is not None and not self.output and fmt == "table"
        if table is not None:
            if self.output:
                write_table(table, self.output, metadata)
            elif len(result.results) > 1:  # several statements returned rows: each in turn, as duckdb prints them
                for position, (number, rows) in enumerate(result.results):
                    if fmt == "json":
                        print_json_line({"statement": number, "rows": rows.to_pylist()})
                        continue
                    if position:
                        print()
                    if fmt == "csv":
                        print_csv(rows)
                    else:
                        print_table(rows, Console(highlight=False), max_rows=self.max_rows)
            elif fmt == "csv":
                print_csv(table)
            elif fmt == "json":
                print_json(table)
            else:
                print_table(table, Console(highlight=False), max_rows=self.max_rows)
            if note and note_under_table:
                print(f"note: {note}")
        if self.output_all:
            for number, rows in result.results:
                write_table(rows, Path(self.output_all) / f"statement_{number}.parquet", metadata)
        if not self.quiet:
            for line in stats.notes:
                stderr.print(f"[dim]note: {escape(line)}[/dim]")
            print_summary(result, self.output)
        else:  # quiet keeps what changes the answers' meaning: answers that carry little signal
            print_quality(result.stats, warnings_only=True)
        _warn_truncated(stats)
        if note and not note_under_table:
            stderr.print(f"[yellow]note: {escape(note)}[/yellow]")
        if self.stats_json:  # last: the result is out even if this fails
            write_text_atomically(self.stats_json, stats.to_json() + "\n")

    def _emit_statements(self, result) -> None:
        note = run_note(result, self.quiet)
        for _, rows in result.results:
            if self.fmt == "json":
                print_json_line({"rows": rows.to_pylist()})
            elif self.fmt == "csv":
                print_csv(rows)
            else:
                print_table(rows, Console(highlight=False), max_rows=self.max_rows)
        note_under_table = bool(result.results) and self.fmt == "table"
        if note and note_under_table:
            print(f"note: {note}")
        for line in result.stats.notes:
            stderr.print(f"[dim]note: {escape(line)}[/dim]")
        if result.stats.nodes:
            print_summary(result, None)
        _warn_truncated(result.stats)
        if note and not note_under_table:
            stderr.print(f"[yellow]note: {escape(note)}[/yellow]")


def run_note(result, quiet: bool = False) -> str | None:
    """What every output of the run must carry beside its rows: the model's note (a test model,
    quantized weights; --quiet keeps only what changes the answers' meaning) and approximate
    mode's label (never hidden: it changes what the rows mean)."""
    model_note = result.model.note if result.model else None
    if quiet and model_note:
        model_note = "; ".join(part for part in model_note.split("; ") if "quantiz" in part) or None
    note = f"model {result.model.name}: {model_note}" if model_note else None
    for label in (approximate_note(result.stats), batch_note(result.stats)):
        if label:
            note = f"{note}; {label}" if note else label
    return note


def batch_note(stats) -> str | None:
    """Batch calibration's label (opt-in): a node's answers depend on the other rows that reached
    it, so they may differ from row-by-row execution (one of the documented exceptions)."""
    nodes = [n.node for n in stats.nodes if (n.decision or {}).get("source") == "batch"]
    if not nodes:
        return None
    return f"BATCH-CALIBRATED {', '.join(nodes)}: answers depend on which rows reached the call (calibration 'batch')"


def _warn_truncated(stats) -> None:
    truncated = sum(n.prompts_truncated for n in stats.nodes if n.model_kind == "llm")
    if truncated:
        stderr.print(f"[yellow]warning: {truncated:,} prompts were cut to fit the model's context (--on-overflow truncate)[/yellow]")
    embedded = sum(n.prompts_truncated for n in stats.nodes if n.model_kind == "embedding")
    if embedded:
        stderr.print(
            f"[yellow]warning: {embedded:,} texts were longer than the embedding model reads: embedded from their "
            "first max_seq_length tokens (texts differing only after that compare as equal)[/yellow]"
        )


def approximate_note(stats) -> str | None:
    """What approximate mode did, per node: the label every output of such a run carries."""
    parts = []
    for node in stats.nodes:
        report = node.approximate
        if not report:
            continue
        targets = report["targets"]
        if report["fallback_to_exact"]:
            parts.append(f"{node.node} evaluated exactly (approximate mode fell back: {report['fallback_to_exact']})")
            continue
        if report.get("against") == "labels":  # join as classification, chosen against labelled pairs
            parts.append(
                f"REWRITTEN {node.node} under labels: {report['proxy_answered']:,} of {report['rows']:,} pairs answered by {report['proxy']}, "
                f"{report['verdict']} (answers under labels, not the model's pairwise answers)"
            )
            continue
        if report.get("guarantee") is False:  # join as classification: its own answers, checked, not bounded
            check = report["check"]
            parts.append(
                f"REWRITTEN {node.node}: {report['proxy_answered']:,} of {report['rows']:,} pairs answered by {report['proxy']}, "
                f"{report['llm_answered']:,} by the LLM (a check on {check['rows']} rows' {check['pairs']:,} pairs against the LLM: "
                f"recall {check['recall']}, precision {check['precision']}; targets {targets['recall']:g} / {targets['precision']:g}, "
                "point estimates, not a guarantee)"
            )
            continue
        parts.append(
            f"APPROXIMATE {node.node}: {report['proxy_answered']:,} of {report['rows']:,} prompts answered by the proxy"
            f"{' (' + report['proxy'] + ')' if report.get('proxy') else ''}, "
            f"{report['llm_answered']:,} by the LLM (targets vs the LLM: recall >= {targets['recall']:g}, precision >= "
            f"{targets['precision']:g}, probability >= {1 - targets['delta']:g}; sample estimates: recall "
            f"{report['estimated_recall']}, precision {report['estimated_precision']})"
        )
    return "; ".join(parts) or None


def signal_lines(stats) -> list[tuple[str, bool]]:
    """Per AI node, what its answers say about themselves (aisql.executor.report.signals): (line, True
    for a warning)."""
    from aisql.executor.report.signals import quality_lines

    return [(line.text, line.warning) for line in quality_lines(stats)]


def print_quality(stats, warnings_only: bool = False) -> None:
    """The nodes' quality lines (aisql.executor.report.signals) on stderr: warnings in yellow."""
    for line, worrying in signal_lines(stats):
        if worrying or not warnings_only:
            stderr.print(f"[yellow]warning: {escape(line)}[/yellow]" if worrying else f"[dim]{escape(line)}[/dim]")


def print_summary(result, output: str | None) -> None:
    from aisql.executor.report.summary import summary_line

    stderr.print("[dim]" + escape(summary_line(result, output)) + "[/dim]")
    print_quality(result.stats)
    workers = result.stats.workers()
    if workers:
        each = ", ".join(
            f"{name} {w['prompts']:,} prompts / {w['computed_tokens']:,} tokens / busy {w['busy_s']:.2f} s" for name, w in workers.items()
        )
        recompute = f"{sum(n.prefix_recompute_tokens for n in result.stats.nodes):,}"
        if any(n.strategy == "prefetch-sliced" for n in result.stats.nodes):
            # a streamed node's token ids never reach the driver: its ledger cannot count them
            recompute += " (not counted for nodes streamed in slices)"
        deaths = "".join(f" · {w['name']} died {w['deaths']}x (its shards went to others; replaced)" for w in result.stats.worker_pool if w["deaths"])
        stderr.print("[dim]" + escape(f"workers: {each} · prefix tokens computed on more than one worker: {recompute}{deaths}") + "[/dim]")
