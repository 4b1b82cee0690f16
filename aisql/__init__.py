"""aisql: run LLM predicates inside SQL, planned like a database and executed like an inference engine.

    import aisql
    con = aisql.connect(model="tiny")
    con.run("SELECT AI.IF(PROMPT('Is {0} a fruit?', 'apple')) AS yes").table

The public names load on first use, so `aisql --version` or a fully cached rerun import only
what they need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aisql.lazy import lazy_exports

from aisql.version import __version__

_EXPORTS = {
    "AisqlError": "aisql.errors",
    "AisqlWarning": "aisql.errors",
    "Connection": "aisql.api",
    "QueryResult": "aisql.api",
    "connect": "aisql.api",
    "DuckDBFunctions": "aisql.duckdb_functions",
    "register": "aisql.duckdb_functions",
}
__all__ = ["AisqlError", "AisqlWarning", "Connection", "DuckDBFunctions", "QueryResult", "__version__", "connect", "register"]

if TYPE_CHECKING:  # pragma: no cover
    from aisql.api import Connection, QueryResult, connect
    from aisql.duckdb_functions import DuckDBFunctions, register
    from aisql.errors import AisqlError, AisqlWarning


__getattr__ = lazy_exports("aisql", _EXPORTS, globals())
