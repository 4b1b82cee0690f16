"""`aisql shell`: what `duckdb` with no arguments gives — statements typed (or piped) one after
another, each run when its `;` arrives, results and errors printed as `aisql run` prints them,
one connection (so one model load and one KV cache) for the whole session.

Input ends a statement at a `;` outside quotes and comments (sqlglot's tokenizer decides), so a
statement may span lines. On a terminal, lines are edited with readline and kept in a history
file beside the result cache.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Iterator, TextIO

from sqlglot.errors import TokenError

from aisql.errors import AisqlError

PROMPT, CONTINUE = "aisql> ", "  ...> "


def complete_statements(buffer: str, dialect: str | None = None) -> tuple[list[str], str]:
    """Split `buffer` into the statements ended by `;` and the unfinished rest."""
    import sqlglot
    from sqlglot.tokens import TokenType

    from aisql.sql.dialects import dialect_for

    try:
        tokens = sqlglot.Dialect.get_or_raise(dialect_for(dialect)).tokenize(buffer)
    except TokenError:  # an open quote or comment: wait for more input
        return [], buffer
    done, start = [], 0
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            piece = buffer[start : token.end + 1]
            if piece.strip(" \n\t;"):
                done.append(piece)
            start = token.end + 1
    return done, buffer[start:]


def lines(stream: TextIO, interactive: bool) -> Iterator[str]:
    """Input lines; on a terminal with a prompt that says whether a statement is open."""
    if not interactive:
        yield from stream
        return
    _history()
    pending = False
    while True:
        try:
            line = input(CONTINUE if pending else PROMPT)
        except EOFError:
            print()
            return
        except KeyboardInterrupt:  # drop the statement being typed, as duckdb does
            print()
            pending = False
            yield "\x00reset"
            continue
        pending = yield line + "\n"  # type: ignore[misc]


def run_shell(con, run_one: Callable[[str], None], stream: TextIO = sys.stdin, dialect: str | None = None) -> int:
    """Read statements until end of input; `run_one` runs and prints one. Returns the exit code:
    1 if any statement failed when input is not a terminal (a piped script), else 0."""
    interactive = stream.isatty() and sys.stdout.isatty()
    failed = False
    buffer = ""
    source = lines(stream, interactive)
    line = next(source, None)
    while line is not None:
        if line == "\x00reset":
            buffer = ""
        else:
            buffer += line
            statements, buffer = complete_statements(buffer, dialect)
            for statement in statements:
                if statement.strip().rstrip(";").strip().lower() in (".quit", ".exit"):
                    return 1 if failed else 0
                try:
                    run_one(statement)
                except AisqlError as err:
                    failed = True
                    from aisql.cli import report_error

                    report_error(err)
                except KeyboardInterrupt:
                    print("interrupted", file=sys.stderr)
        try:
            line = source.send(bool(buffer.strip())) if interactive else next(source, None)
        except StopIteration:
            line = None
    if buffer.strip():
        try:
            run_one(buffer)  # the last statement may lack its `;`
        except AisqlError as err:
            failed = True
            from aisql.cli import report_error

            report_error(err)
    return 1 if failed and not interactive else 0


def _history() -> None:
    try:
        import atexit
        import readline

        from aisql.executor.cache import default_cache_path

        path = Path(default_cache_path()).parent / "shell_history"
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            readline.read_history_file(path)
        readline.set_history_length(2000)
        atexit.register(readline.write_history_file, path)
    except (ImportError, OSError):
        pass
