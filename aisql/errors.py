"""Errors a user can act on.

Every stage raises an `AisqlError` (or a subclass) for bad input, so the CLI can print one line —
the problem, where it is, and a hint — instead of a traceback. Positions are 1-based SQL
line/column numbers of the user's text, never of SQL that aisql generated internally.
"""

from __future__ import annotations


class AisqlError(Exception):
    """A problem with the user's input or environment, reported without a traceback."""

    def __init__(
        self,
        message: str,
        *,
        line: int | None = None,
        col: int | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.col = col
        self.hint = hint

    def located(self) -> str:
        """The message with its position, as the CLI prints it."""
        text = self.message
        if self.line is not None:
            text += f" (line {self.line}, column {self.col})" if self.col else f" (line {self.line})"
        return text

    def __str__(self) -> str:
        text = self.located()
        if self.hint:
            text += f"\nhint: {self.hint}"
        return text


class AisqlWarning(UserWarning):
    """Something that changes what results mean (a fallback model, say), raised through
    `warnings.warn` in the Python API and DuckDB functions; the CLI prints it as one line."""


class SqlSyntaxError(AisqlError):
    """The SQL text does not parse."""


class BindError(AisqlError):
    """The SQL parses but refers to something that does not exist or is used wrongly."""


class TemplateError(AisqlError):
    """A PROMPT template is malformed or does not match its arguments."""


class ConnectionBusyError(AisqlError):
    """An aisql connection was called from a second thread while a call was running on it."""


class ModelError(AisqlError):
    """A model cannot be found, loaded or used."""


class DataError(AisqlError):
    """Input data cannot be read, or the query failed on the data (DuckDB runtime errors)."""
