"""Evaluate a sample of an AI predicate's prompts to measure its selectivity, before planning.

The answers go to the run's answer store, so the prompts sampled are not paid twice: when the
node runs, they are already answered. The model work is logged per node and added to its stats.
"""

from __future__ import annotations

import time

from aisql.engine.base import EngineStats
from aisql.executor.answers.answering import Answering
from aisql.executor.answers.evaluate import ContextOverflow, evaluate
from aisql.planner.plan import AINode


class SampleEvaluator:
    def __init__(self, answering: Answering) -> None:
        self.answering = answering  # its budget and overflow mode are the run's
        self.prompts: dict[str, int] = {}  # node id -> prompts evaluated for samples
        self.work: dict[str, EngineStats] = {}  # node id -> engine work spent on them

    def __call__(self, node: AINode, tuples: list[tuple]) -> list | None:
        """The node's values for `tuples`; None when the budget does not allow the sample (the
        planner then assumes a default selectivity)."""
        answering = self.answering
        budget, on_overflow = answering.options.budget, answering.options.on_overflow
        task = node.call.task
        key = answering.key(task)
        texts = [node.call.template.render(values) for values in tuples]
        known = answering.store.get_many(key, texts, task.read)
        todo = list(dict.fromkeys(t for t in texts if t not in known))
        if todo:
            if budget is not None and budget.allowed(len(todo)) < len(todo):
                return None
            # committed every checkpoint_every prompts, as the node's own answers are: a kill
            # during the sample keeps what was answered (`--checkpoint-every 5` used to commit
            # the whole sample at once)
            size = max(1, answering.options.checkpoint_every)
            for start in range(0, len(todo), size):
                chunk = todo[start : start + size]
                started = time.perf_counter()
                try:
                    fresh, work = answering.measured(lambda engine: evaluate(engine, task, chunk, on_overflow=on_overflow))
                except ContextOverflow:
                    return None  # e.g. a sampled prompt over the context: the run reports it in place
                if budget is not None:
                    budget.spend(len(fresh), time.perf_counter() - started)
                answering.store.put_many(key, fresh)
                known.update(fresh)
                self.work[node.id] = self.work.get(node.id, EngineStats()) + work
                self.prompts[node.id] = self.prompts.get(node.id, 0) + len(chunk)
        return [known[t].value for t in texts]
