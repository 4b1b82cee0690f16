"""aisql: run LLM predicates inside SQL, planned like a database and executed like an inference engine.

    import aisql
    con = aisql.connect(model="tiny")
    con.run("SELECT AI.IF(PROMPT('Is {0} a fruit?', 'apple')) AS yes").table
"""

__version__ = "0.1.0"

from aisql.api import Connection, QueryResult, connect  # noqa: E402
from aisql.errors import AisqlError  # noqa: E402
from aisql.duckdb_functions import DuckDBFunctions, register  # noqa: E402

__all__ = ["AisqlError", "Connection", "QueryResult", "__version__", "connect", "register"]
