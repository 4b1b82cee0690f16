"""The user's SQL text, and positions in it.

sqlglot records character offsets on tokens; users think in lines and columns. Everything that
reports a position goes through `SourceText` so the numbers always refer to what the user wrote.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

from sqlglot import exp


@dataclass(frozen=True)
class SourceText:
    text: str
    _line_starts: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        starts = [0]
        for i, ch in enumerate(self.text):
            if ch == "\n":
                starts.append(i + 1)
        object.__setattr__(self, "_line_starts", tuple(starts))

    def line_col(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of a 0-based character offset."""
        offset = max(0, min(offset, len(self.text)))
        line = bisect.bisect_right(self._line_starts, offset) - 1
        return line + 1, offset - self._line_starts[line] + 1

    def offset(self, line: int, col: int) -> int:
        """0-based offset of a 1-based (line, column)."""
        return self._line_starts[line - 1] + col - 1

    def position_of(self, node: exp.Expression) -> tuple[int | None, int | None]:
        """Where `node` starts: its own token, else the first descendant that has one."""
        start = node_start(node)
        if start is None:
            return None, None
        return self.line_col(start)

    def at(self, node: exp.Expression) -> dict[str, int | None]:
        """`node`'s position as an error's keyword arguments: `raise BindError(msg, **source.at(node))`."""
        line, col = self.position_of(node)
        return {"line": line, "col": col}


def node_start(node: exp.Expression) -> int | None:
    """Smallest token start offset recorded on `node` or its descendants (sqlglot keeps them in meta)."""
    best: int | None = None
    for sub in node.walk():
        start = sub.meta.get("start") if sub.meta else None
        if start is not None and (best is None or start < best):
            best = start
    return best


# Blanks between SQL words, as SQL allows them: spaces, /* block */ and -- line comments. For the
# statements read by pattern rather than by sqlglot (FlockMTL's resource statements, PREPARE's head).
BLANK = r"(?:\s|/\*.*?\*/|--[^\n]*(?:\n|$))"
_LEADING = re.compile(rf"{BLANK}*", re.DOTALL)


def code_start(text: str) -> int:
    """Where a statement's own text begins: after the blanks and comments written before it."""
    return _LEADING.match(text).end()
