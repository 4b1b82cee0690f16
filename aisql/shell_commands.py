"""The dot-commands of `aisql shell`, as DuckDB's CLI spells them: `.tables`, `.schema`, `.mode`,
`.help`, `.quit` / `.exit`. A line starting with `.` outside a statement is one (no `;` needed);
users arriving from `duckdb` type them by habit, and reading them as SQL gave a syntax error.
"""

from __future__ import annotations

import fnmatch
import sys
from typing import Callable

from aisql.errors import AisqlError

HELP = {
    ".help": "show this list",
    ".tables [PATTERN]": "names of tables and views (LIKE-style PATTERN: % and _)",
    ".schema [PATTERN]": "CREATE statements of tables and views",
    ".mode [table|csv|json]": "how results print (no argument: the current mode)",
    ".label [ai_N] [FILE]": "label rows of the last statement's AI call into a CSV file its examples can read (as `aisql label`)",
    ".quit, .exit": "leave the shell",
}
MODES = ("table", "csv", "json")


class Quit(Exception):
    """`.quit` / `.exit`: the shell ends."""


class DotCommands:
    """Runs one dot-command against the shell's connection and printer."""

    def __init__(self, con, printer=None, out: Callable[[str], None] | None = None, read: Callable[[str], str | None] | None = None) -> None:
        self.con = con
        self.printer = printer
        self.out = out or (lambda text: print(text, file=sys.stdout))
        self.read = read  # the next input line, for .label's answers (None: end of input)
        self.last_statement: str | None = None  # the last statement run, for .label

    def run(self, line: str) -> None:
        words = line.strip().rstrip(";").split()
        command, args = words[0].lower(), words[1:]
        handler = {
            ".quit": self._quit,
            ".exit": self._quit,
            ".help": self._help,
            ".tables": self._tables,
            ".schema": self._schema,
            ".mode": self._mode,
            ".label": self._label,
        }.get(command)
        if handler is None:
            raise AisqlError(f"unknown command {command!r}", hint="`.help` lists the dot-commands: " + ", ".join(c.split()[0].rstrip(",") for c in HELP))
        handler(args)

    def _quit(self, args: list[str]) -> None:
        raise Quit()

    def _help(self, args: list[str]) -> None:
        width = max(len(c) for c in HELP)
        self.out("\n".join(f"{command.ljust(width)}  {text}" for command, text in HELP.items()))
        self.out("Anything else is SQL, run when its ; arrives.")

    def _relations(self, args: list[str]) -> list[tuple[str, str]]:
        """(name, CREATE statement) of the user's tables and views, temporary ones included."""
        if self.con is None:
            return []
        rows = self.con.duckdb.execute(
            "SELECT table_name, sql FROM duckdb_tables() WHERE NOT internal "
            "UNION ALL SELECT view_name, sql FROM duckdb_views() WHERE NOT internal ORDER BY 1"
        ).fetchall()
        if args:
            pattern = args[0].replace("%", "*").replace("_", "?")
            rows = [row for row in rows if fnmatch.fnmatchcase(row[0].lower(), pattern.lower())]
        return rows

    def _tables(self, args: list[str]) -> None:
        names = [name for name, _ in self._relations(args)]
        if names:
            self.out("  ".join(names))

    def _schema(self, args: list[str]) -> None:
        for _, sql in self._relations(args):
            self.out(sql.rstrip(";") + ";")

    def _mode(self, args: list[str]) -> None:
        if self.printer is None:
            raise AisqlError(".mode needs the shell's printer")
        if not args:
            self.out(f"current output mode: {self.printer.fmt}")
            return
        mode = args[0].lower()
        if mode not in MODES:
            raise AisqlError(f"unknown mode {args[0]!r}", hint="modes: " + ", ".join(MODES))
        self.printer.fmt = mode

    def _label(self, args: list[str]) -> None:
        """`.label [ai_N] [FILE]`: `aisql label` over the last statement run, answers read from
        the shell's own input (the keyboard, or the next lines of a piped script)."""
        from aisql.labelling import Labelling, run_loop

        if self.con is None or self.read is None:
            raise AisqlError(".label needs the shell's connection and input")
        if self.last_statement is None:
            raise AisqlError(".label labels the last statement's AI call, and none has run yet", hint="run the query first, then .label")
        call = next((a for a in args if a.lower().startswith("ai_")), None)
        path = next((a for a in args if a is not call), None)
        labelling = Labelling(self.con, self.last_statement, call=call, labels_path=path)
        labelling.ask_model()
        say = lambda text: print(text, file=sys.stderr)  # noqa: E731 - people's lines go to stderr
        say(f"labelling {labelling.node.id}: {len(labelling.candidates):,} candidate rows; {len(labelling.labelled):,} labels in {labelling.path} so far (q ends)")
        added = run_loop(labelling, self.read, say)
        say(f"{added:,} labels added, {len(labelling.labelled):,} in {labelling.path}")
