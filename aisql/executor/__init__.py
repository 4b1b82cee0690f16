"""Executor: runs plans — DuckDB for the relational part, the engine for AI nodes.

Its names load on first use, so a door that only reads the run options' declaration
(aisql.executor.options.run_options: the CLI, the dbt plugin) imports nothing else of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aisql.lazy import lazy_exports

_LAZY = {
    "Answer": "aisql.executor.store.answer_store",
    "AnswerStore": "aisql.executor.store.answer_store",
    "MemoryAnswerStore": "aisql.executor.store.answer_store",
    "Executor": "aisql.executor.plan_executor",
    "StatementResult": "aisql.executor.plan_executor",
    "NodeStats": "aisql.executor.report.run_stats",
    "RunStats": "aisql.executor.report.run_stats",
}

if TYPE_CHECKING:  # pragma: no cover
    from aisql.executor.plan_executor import Executor, StatementResult
    from aisql.executor.report.run_stats import NodeStats, RunStats
    from aisql.executor.store.answer_store import Answer, AnswerStore, MemoryAnswerStore

__all__ = ["Answer", "AnswerStore", "Executor", "MemoryAnswerStore", "NodeStats", "RunStats", "StatementResult"]

__getattr__ = lazy_exports("aisql.executor", _LAZY, globals())
