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
    def __init__(self, engine: Callable[[], Engine], store: AnswerStore, namespace: Callable[[], str] = lambda: "") -> None:
        self._engine = engine
        self.store = store
        self._namespace = namespace
        self.prompts: dict[str, int] = {}  # node id -> prompts evaluated for samples
        self.work: dict[str, EngineStats] = {}  # node id -> engine work spent on them

    def __call__(self, node: AINode, tuples: list[tuple]) -> list:
        task = task_for(node.call)
        key = f"{self._namespace()}/{task.signature}"
        texts = [node.call.template.render(values) for values in tuples]
        known = self.store.get_many(key, texts)
        todo = list(dict.fromkeys(t for t in texts if t not in known))
        if todo:
            engine = self._engine()
            before = engine.stats.copy()
            fresh = evaluate(engine, task, todo)
            self.store.put_many(key, fresh)
            known.update(fresh)
            delta = engine.stats.since(before)
            previous = self.work.get(node.id)
            self.work[node.id] = delta if previous is None else _add(previous, delta)
            self.prompts[node.id] = self.prompts.get(node.id, 0) + len(todo)
        return [known[t].value for t in texts]


def _add(a: EngineStats, b: EngineStats) -> EngineStats:
    return EngineStats(**{name: getattr(a, name) + getattr(b, name) for name in EngineStats.__dataclass_fields__})
