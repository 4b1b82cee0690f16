"""Executor: runs plans — DuckDB for the relational part, the engine for AI nodes.

Its names load on first use, so a door that only reads the run options' declaration
(aisql.executor.options.run_options: the CLI, the dbt plugin) imports nothing else of it.
"""

from __future__ import annotations

from aisql.lazy import lazy_exports

_LAZY = (  # name -> the module it loads from
    dict.fromkeys(("Answer", "AnswerStore", "MemoryAnswerStore"), "aisql.executor.store.answer_store")
    | dict.fromkeys(("Executor", "StatementResult"), "aisql.executor.plan_executor")
    | dict.fromkeys(("NodeStats", "RunStats"), "aisql.executor.report.run_stats")
)
__all__ = sorted(_LAZY)

__getattr__ = lazy_exports("aisql.executor", _LAZY, globals())
