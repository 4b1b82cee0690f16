"""The terminal's stderr, where notes, summaries, warnings and errors go (data goes to stdout
only), and escaping text for rich markup. Light: `aisql --version` imports nothing more."""

from __future__ import annotations

from rich.console import Console

stderr = Console(stderr=True, highlight=False, soft_wrap=True)


def escape(text: str) -> str:
    """`text` printed as it is, never read as rich markup."""
    return text.replace("[", r"\[")
