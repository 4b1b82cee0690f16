"""Evaluate a sample of an AI predicate's prompts to measure its selectivity, before planning.

The answers go to the run's answer store, so the prompts sampled are not paid twice: when the
node runs, they are already answered. The model work is logged per node and added to its stats.
"""

from __future__ import annotations

import time
from typing import Callable

from aisql.engine.base import Engine, EngineStats
from aisql.executor.answers import AnswerStore
from aisql.executor.budget import Budget
from aisql.executor.evaluate import ContextOverflow, evaluate
from aisql.planner.plan import AINode


class SampleEvaluator:
    def __init__(
        self,
        engine: Callable[[], Engine],
        store: AnswerStore,
        model_fingerprint: Callable[[], str] = lambda: "",
        budget: Budget | None = None,
        on_overflow: str = "error",
    ) -> None:
        self._engine = engine
        self.store = store
        self._model_fingerprint = model_fingerprint
        self.budget = budget
        self.on_overflow = on_overflow
        self.prompts: dict[str, int] = {}  # node id -> prompts evaluated for samples
        self.work: dict[str, EngineStats] = {}  # node id -> engine work spent on them

    def __call__(self, node: AINode, tuples: list[tuple]) -> list | None:
        """The node's values for `tuples`; None when the budget does not allow the sample (the
        planner then assumes a default selectivity)."""
        task = node.call.task
        key = task.store_key(self._model_fingerprint())
        texts = [node.call.template.render(values) for values in tuples]
        known = self.store.get_many(key, texts)
        todo = list(dict.fromkeys(t for t in texts if t not in known))
        if todo:
            if self.budget is not None and self.budget.allowed(len(todo)) < len(todo):
                return None
            engine = self._engine()
            before = engine.stats.copy()
            started = time.perf_counter()
            try:
                fresh = evaluate(engine, task, todo, on_overflow=self.on_overflow)
            except ContextOverflow:
                return None  # e.g. a sampled prompt over the context: the run reports it in place
            if self.budget is not None:
                self.budget.spend(len(fresh), time.perf_counter() - started)
            self.store.put_many(key, fresh)
            known.update(fresh)
            delta = engine.stats.since(before)
            previous = self.work.get(node.id)
            self.work[node.id] = delta if previous is None else _add(previous, delta)
            self.prompts[node.id] = self.prompts.get(node.id, 0) + len(todo)
        return [known[t].value for t in texts]


def _add(a: EngineStats, b: EngineStats) -> EngineStats:
    return EngineStats(**{name: getattr(a, name) + getattr(b, name) for name in EngineStats.__dataclass_fields__})
