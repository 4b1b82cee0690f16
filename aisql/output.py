"""Results out: files by suffix (written atomically), or stdout as a table, CSV or JSON.

Files are written by DuckDB's COPY, so CSV/Parquet/JSON look exactly as DuckDB users expect. The
target path only ever holds a complete file: we write a temporary file beside it and rename.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import duckdb
import pyarrow as pa
from rich.console import Console
from rich.table import Table

from aisql.errors import DataError

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
        if pid.isdigit() and not _alive(int(pid)):
            try:
                stale.unlink()
            except OSError:
                pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def write_table(table: pa.Table, path: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
    target = check_output_path(path)
    fmt = FILE_FORMATS[target.suffix.lower()]
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
    sys.stdout.write(json.dumps(table.to_pylist(), default=str, ensure_ascii=False, indent=2) + "\n")


def print_json_line(document: dict) -> None:
    """One JSON document on one line (JSON Lines), for one of several results."""
    sys.stdout.write(json.dumps(document, default=str, ensure_ascii=False) + "\n")


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _escape(text: str) -> str:
    return text.replace("[", r"\[")
