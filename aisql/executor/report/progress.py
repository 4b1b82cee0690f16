"""Progress of AI nodes, reported while they run (the CLI draws it on stderr; the default is silence)."""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    def start(self, node: str, description: str, total: int, cached: int) -> None:
        """A node begins evaluating `total` new prompts; `cached` were answered already."""

    def advance(self, node: str, prompts: int, tokens: int) -> None:
        """`prompts` more answered, `tokens` computed for them."""

    def finish(self, node: str) -> None:
        ...


class NoProgress:
    def start(self, node: str, description: str, total: int, cached: int) -> None:
        pass

    def advance(self, node: str, prompts: int, tokens: int) -> None:
        pass

    def finish(self, node: str) -> None:
        pass
