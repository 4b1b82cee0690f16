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

from aisql.errors import AisqlError

PROMPT, CONTINUE = "aisql> ", "  ...> "


def complete_statements(buffer: str, dialect: str | None = None) -> tuple[list[str], str]:
    """Split `buffer` into the statements ended by `;` and the unfinished rest."""
    splitter = StatementSplitter(dialect)
    done = splitter.feed(buffer)
    return done, splitter.unfinished


class StatementSplitter:
    """Statements as their `;` arrives, tokenizing each piece of input about once.

    sqlglot's tokenizer decides where a `;` ends a statement (not inside quotes or comments), but
    it cannot resume mid-text: tokenizing the whole open statement after every line made a long
    statement quadratic (a 160 KB INSERT took minutes). So the splitter keeps the offset where the
    lexer is known to be in its plain state (after text that tokenized cleanly and ended at a line
    end) and tokenizes only from there; while a quote or comment is open, it retries only when the
    new text could close it. Statements before an unclosed quote or comment still run."""

    _CLOSERS = frozenset("'\"`*$]")

    def __init__(self, dialect: str | None = None) -> None:
        import sqlglot

        from aisql.sql.dialects import dialect_for

        self._dialect = sqlglot.Dialect.get_or_raise(dialect_for(dialect))
        self.unfinished = ""  # the open statement's text
        self._plain = 0  # offset in `unfinished` where the lexer is in its plain state
        self._open = False  # text after _plain has an open quote or comment

    def feed(self, text: str) -> list[str]:
        """Add input; return the statements it completed (each with its `;`)."""
        self.unfinished += text
        if self._open and not self._CLOSERS.intersection(text):
            return []
        if not self._open and ";" not in self.unfinished[self._plain :]:
            self._advance_plain_state()
            return []
        done = self._split(len(self.unfinished))
        if done is None:
            # an open quote or comment: statements ended before it still complete
            done = []
            for end in self._semicolons_in(len(self.unfinished) - len(text)):
                done = self._split(end + 1)
                if done is not None:
                    break
            self._open = True
            return done or []
        self._open = False
        return done

    def reset(self) -> None:
        self.unfinished, self._plain, self._open = "", 0, False

    def unclosed(self) -> str | None:
        """What keeps the unfinished text from being a statement: an open quote or comment, else None."""
        if not self._open:
            return None
        rest = self.unfinished[self._plain :]
        return "an unclosed /* comment" if "/*" in rest and rest.rfind("/*") > rest.rfind("*/") else "an unclosed quote"

    def _tokens(self, text: str):
        from sqlglot.errors import TokenError

        try:
            return self._dialect.tokenize(text)
        except TokenError:
            return None

    def _split(self, end: int) -> list[str] | None:
        """Tokenize unfinished[_plain:end]; cut the statements it completes. None: open quote/comment."""
        from sqlglot.tokens import TokenType

        base = self._plain
        tokens = self._tokens(self.unfinished[base:end])
        if tokens is None:
            return None
        done, start = [], 0
        for token in tokens:
            if token.token_type == TokenType.SEMICOLON:
                cut = base + token.end + 1
                piece = self.unfinished[start:cut]
                if piece.strip(" \n\t;"):
                    done.append(piece)
                start = cut
        self.unfinished, self._plain = self.unfinished[start:], max(0, end - start)
        if not self.unfinished.endswith("\n"):
            self._plain = self._last_line_start()
        return done

    def _advance_plain_state(self) -> None:
        """No `;` yet: check the new lines tokenize (no open quote), so later feeds start there."""
        end = self.unfinished.rfind("\n") + 1
        if end <= self._plain:
            return
        if self._tokens(self.unfinished[self._plain : end]) is None:
            self._open = True
        else:
            self._plain = end

    def _last_line_start(self) -> int:
        return min(self._plain, self.unfinished.rfind("\n") + 1)

    def _semicolons_in(self, start: int) -> list[int]:
        """The `;` of the newest text, last first (earlier ones were tried when they arrived)."""
        text, low = self.unfinished, max(start, self._plain)
        found, at = [], text.rfind(";")
        while at >= low and len(found) < 16:
            found.append(at)
            at = text.rfind(";", low, at)
        return found


def lines(stream: TextIO, interactive: bool) -> Iterator[str]:
    """Input lines; on a terminal with a prompt that says whether a statement is open. A line
    that is not valid UTF-8 comes as a `\x00bad-utf8 N` marker (N: the line number)."""
    if not interactive:
        source = getattr(stream, "buffer", None)
        for number, raw in enumerate(source if source is not None else stream, 1):
            if isinstance(raw, str):
                yield raw
                continue
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError:
                yield f"\x00bad-utf8 {number}"
        return
    _history()
    pending = False
    number = 0
    while True:
        number += 1
        try:
            line = input(CONTINUE if pending else PROMPT)
        except EOFError:
            print()
            yield "\x00eof"
            return
        except UnicodeDecodeError:
            line = f"\x00bad-utf8 {number}"
        except KeyboardInterrupt:  # drop the statement being typed, as duckdb does
            print()
            pending = False
            yield "\x00reset"
            continue
        pending = yield line if line.startswith("\x00") else line + "\n"  # type: ignore[misc]


def run_shell(con, run_one: Callable[[str], None], stream: TextIO = sys.stdin, dialect: str | None = None, printer=None) -> int:
    """Read statements until end of input; `run_one` runs and prints one. Returns the exit code:
    1 if any statement failed when input is not a terminal (a piped script), 130 (143) if Ctrl-C
    (SIGTERM) stopped a piped script — the statements after it do not run — else 0.

    A line starting with `.` outside a statement is a dot-command (aisql.shell_commands: `.tables`,
    `.schema`, `.mode`, `.help`, `.quit`), no `;` needed. In a piped script, an error names its
    line and column in the script, not in its statement. At the end of piped input the last
    statement may lack its `;` (as in duckdb's CLI); on a terminal, a statement still open at
    Ctrl-D is discarded with a note, as at Ctrl-C — never run half-typed (`DELETE FROM t` +
    Enter + Ctrl-D must not delete)."""
    interactive = stream.isatty() and sys.stdout.isatty()
    if interactive:  # Ctrl-C cancels the statement running (or being typed), as in duckdb's shell
        return _read_and_run(con, run_one, stream, dialect, printer, interactive)
    from aisql.stops import is_interrupt, report_interrupt, stop_signals

    # A piped script stops at Ctrl-C or SIGTERM: the statements after the stopped one do not run,
    # the answers kept are said, and the exit status is 130 (143) — never 0 as if it had finished.
    with stop_signals():
        try:
            return _read_and_run(con, run_one, stream, dialect, printer, interactive)
        except (KeyboardInterrupt, Exception) as stop:
            if not is_interrupt(stop):
                raise
            return report_interrupt(getattr(con, "store", None), stop)


def _read_and_run(con, run_one: Callable[[str], None], stream: TextIO, dialect: str | None, printer, interactive: bool) -> int:
    """run_shell's loop: statements and dot-commands from `stream` until its end (or `.quit`)."""
    return _ShellReader(con, run_one, stream, dialect, printer, interactive).read()


class _ShellReader:
    """One shell session's input: lines into statements (run as each completes) and dot-commands,
    with every error placed at its line and column in the script."""

    def __init__(self, con, run_one: Callable[[str], None], stream: TextIO, dialect: str | None, printer, interactive: bool) -> None:
        from aisql.shell_commands import DotCommands

        self.con, self.run_one, self.dialect, self.interactive = con, run_one, dialect, interactive
        self.failed = False
        self.splitter = StatementSplitter(dialect)
        self.source = lines(stream, interactive)
        self.commands = DotCommands(con, printer, read=self.read_answer)
        self.consumed = 0  # input lines read so far
        self.start = [1, 0]  # (line, column) in the script where the splitter's unfinished text begins

    def read(self) -> int:
        line = next(self.source, None)
        while line is not None:
            ended = self._line(line)
            if ended == "quit":
                return self._status()
            if ended == "eof":
                break
            try:
                line = self.source.send(bool(self.splitter.unfinished.strip())) if self.interactive else next(self.source, None)
            except StopIteration:
                line = None
        self._finish()
        return self._status()

    def _status(self) -> int:
        return 1 if self.failed and not self.interactive else 0

    def _line(self, line: str) -> str | None:
        """One input line (or a marker the reader sent); "quit" (.quit: the session ends here) or
        "eof" (the input ended: what is left is finished) when the reading stops."""
        from aisql.shell_commands import Quit

        if not line.startswith("\x00"):
            self.consumed += 1
        if line == "\x00reset":
            self.restart()
        elif line == "\x00eof":
            return "eof"
        elif line.startswith("\x00bad-utf8"):
            self.consumed += 1
            number = line.split()[1]
            self.report(AisqlError(f"input line {number} is not valid UTF-8 text", hint="the statement it belongs to was discarded; save the script as UTF-8"))
            self.restart()
        elif not self.splitter.unfinished.strip() and line.lstrip().startswith("."):
            try:
                self.commands.run(line)
            except Quit:
                return "quit"
            except AisqlError as err:
                if not self.interactive:
                    err.line, err.col = self.consumed, 1
                self.report(err)
            self.restart()
        else:
            for statement in self.splitter.feed(line):
                self.run(statement)
        return None

    def _finish(self) -> None:
        """The input ended: a last statement without its `;` runs; an unclosed one is said."""
        rest = self.splitter.unfinished
        if not rest.strip() or not _has_sql(rest, self.dialect):
            return
        if self.interactive:
            print("unfinished statement discarded (end a statement with ;)", file=sys.stderr)
        elif self.splitter.unclosed():
            self.report(AisqlError(f"the script ends inside {self.splitter.unclosed()}; its last statement did not run", hint="close it, then run the script again"))
        else:
            self.run(rest)  # the last statement of a script may lack its `;`

    def read_answer(self, prompt: str) -> str | None:
        """One answer line for a dot-command that asks (.label): typed at a prompt of its own,
        or the script's next line (shown after the prompt, as a terminal would)."""
        if self.interactive:
            try:
                return input(prompt)
            except EOFError:
                return None
        answer = next(self.source, None)
        if answer is None:
            return None
        self.consumed += 1
        print(prompt + answer.rstrip("\n"), file=sys.stderr)
        return answer.rstrip("\r\n")

    def report(self, err: AisqlError, at: tuple[int, int] | None = None) -> None:
        from aisql.stops import report_error

        self.failed = True
        if at is not None and not self.interactive and err.line is not None:
            err.col = err.col + at[1] if err.line == 1 and err.col is not None else err.col
            err.line = err.line + at[0] - 1
        report_error(err)

    def run(self, statement: str) -> None:
        from aisql.stops import is_interrupt, kept_message

        at = tuple(self.start)
        newlines = statement.count("\n")
        self.start[0] += newlines
        self.start[1] = len(statement) - statement.rfind("\n") - 1 if newlines else self.start[1] + len(statement)
        try:
            self.commands.last_statement = statement
            self.run_one(statement)
        except (KeyboardInterrupt, Exception) as err:
            if is_interrupt(err) and not self.interactive:
                raise  # a piped script stops here (run_shell)
            if is_interrupt(err):
                print(f"interrupted: {kept_message(getattr(self.con, 'store', None))}", file=sys.stderr)
            elif isinstance(err, AisqlError):
                self.report(err, at)
            else:
                raise

    def restart(self) -> None:
        self.splitter.reset()
        self.start[:] = [self.consumed + 1, 0]


def _has_sql(text: str, dialect: str | None) -> bool:
    """Whether text holds anything but comments (a trailing `-- done` is no statement)."""
    import sqlglot
    from sqlglot.errors import TokenError

    from aisql.sql.dialects import dialect_for

    try:
        return bool(sqlglot.Dialect.get_or_raise(dialect_for(dialect)).tokenize(text))
    except TokenError:
        return True


def _history() -> None:
    try:
        import atexit
        import readline

        from aisql.executor.store.cache import default_cache_path

        path = Path(default_cache_path()).parent / "shell_history"
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            readline.read_history_file(path)
        readline.set_history_length(2000)
        atexit.register(readline.write_history_file, path)
    except (ImportError, OSError):
        pass
