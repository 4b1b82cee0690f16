"""Executor: runs plans — DuckDB for the relational part, the engine for AI nodes."""

from aisql.executor.store.answer_store import Answer, AnswerStore, MemoryAnswerStore
from aisql.executor.plan_executor import Executor, StatementResult
from aisql.executor.report.run_stats import NodeStats, RunStats

__all__ = ["Answer", "AnswerStore", "Executor", "MemoryAnswerStore", "NodeStats", "RunStats", "StatementResult"]
