"""Evaluate a sample of an AI predicate's prompts to measure its selectivity, before planning.

The answers go to the run's answer store, so the prompts sampled are not paid twice: when the
node runs, they are already answered. The model work is logged per node and added to its stats.
"""

from __future__ import annotations

from typing import Callable

from aisql.engine.base import Engine, EngineStats
from aisql.executor.answers import AnswerStore
from aisql.executor.evaluate import evaluate
from aisql.executor.tasks import task_for
from aisql.planner.plan import AINode


class SampleEvaluator:
    def __init__(self, engine: Callable[[], Engine], store: AnswerStore) -> None:
        self._engine = engine
        self.store = store
        self.prompts: dict[str, int] = {}  # node id -> prompts evaluated for samples
        self.work: dict[str, EngineStats] = {}  # node id -> engine work spent on them

    def __call__(self, node: AINode, tuples: list[tuple]) -> list:
        task = task_for(node.call)
        texts = [node.call.template.render(values) for values in tuples]
        todo = list(dict.fromkeys(t for t in texts if self.store.get(task.signature, t) is None))
        if todo:
            engine = self._engine()
            before = engine.stats.copy()
            self.store.put_many(task.signature, evaluate(engine, task, todo))
            delta = engine.stats.since(before)
            previous = self.work.get(node.id)
            self.work[node.id] = delta if previous is None else _add(previous, delta)
            self.prompts[node.id] = self.prompts.get(node.id, 0) + len(todo)
        return [self.store.get(task.signature, t).value for t in texts]


def _add(a: EngineStats, b: EngineStats) -> EngineStats:
    return EngineStats(**{name: getattr(a, name) + getattr(b, name) for name in EngineStats.__dataclass_fields__})
