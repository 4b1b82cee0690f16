"""The AI functions: one module each (`ai_*.py`, a `FUNCTION` object per module), found here.

Adding a function over an existing engine request means adding one module beside these: the
binder, planner, executor and `aisql.register` all read this registry.
"""

from __future__ import annotations

import importlib
import pkgutil

from aisql.functions.base import AIFunction, DuckDBParameter, Options, Request, Task

__all__ = ["FUNCTIONS", "AIFunction", "DuckDBParameter", "Options", "Request", "Task", "by_name", "by_spelling", "known_spellings"]


def _discover() -> tuple[AIFunction, ...]:
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("ai_"):
            module = importlib.import_module(f"{__name__}.{info.name}")
            found.append(module.FUNCTION)
    return tuple(found)


FUNCTIONS: tuple[AIFunction, ...] = _discover()
_BY_SPELLING = {spelling.upper(): f for f in FUNCTIONS for spelling in f.spellings}
_BY_NAME = {f.name: f for f in FUNCTIONS}


def by_spelling(spelling: str) -> AIFunction | None:
    """The function written `spelling` (`AI.IF`, `ai_filter`, ...), or None."""
    return _BY_SPELLING.get(spelling.upper())


def by_name(name: str) -> AIFunction:
    return _BY_NAME[name]


def known_spellings() -> str:
    return ", ".join(" / ".join(f.spellings[:2]) for f in FUNCTIONS)
