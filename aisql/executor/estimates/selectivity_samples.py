"""Evaluate a sample of an AI predicate's prompts to measure its selectivity, before planning.

The answers go to the run's answer store, so the prompts sampled are not paid twice: when the
node runs, they are already answered. The model work is logged per node and added to its stats.
"""

from __future__ import annotations

from aisql.engine.base import EngineStats
from aisql.executor.answers.answering import Answering
from aisql.executor.answers.checkpointed import Committed, ProgressLine, run_checkpointed
from aisql.executor.options.checkpoints import ChunkSizer
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
        budget = answering.options.budget
        task = node.call.task
        key = answering.key(task)
        texts = [node.call.template.render(values) for values in tuples]
        known = answering.store.get_many(key, texts, task.read)
        todo = list(dict.fromkeys(t for t in texts if t not in known))
        if todo:
            if budget is not None and budget.allowed(len(todo)) < len(todo):
                return None
            try:
                self._answer(node, task, key, todo, known)
            except ContextOverflow:
                return None  # e.g. a sampled prompt over the context: the run reports it in place
        return [known[t].value for t in texts]

    def _answer(self, node: AINode, task, key: str, todo: list[str], known: dict) -> None:
        """The sample's new texts through the run's checkpoint loop: committed as the node's own
        answers are, so a kill during the sample keeps what was answered. Its first chunk is the
        whole sample up to checkpoint_every (a sample is small, and sizing it apart keeps the
        run's measured rate, and so the nodes' chunks, as they were)."""
        answering, on_overflow = self.answering, self.answering.options.on_overflow
        every = answering.options.checkpoint_every
        sizer = ChunkSizer(every, answering.options.checkpoint_seconds, first_chunk=every)

        def commit(chunk, result) -> Committed:
            fresh, work = result
            answering.store.put_many(key, fresh)
            known.update(fresh)
            self.work[node.id] = self.work.get(node.id, EngineStats()) + work
            self.prompts[node.id] = self.prompts.get(node.id, 0) + len(chunk)
            return Committed(len(fresh), work.computed_tokens)

        line = ProgressLine(answering.options.progress, f"{node.id}-sample", f"{node.call.describe()} [sample]")
        run_checkpointed(
            todo,
            lambda chunk: answering.measured(lambda engine: evaluate(engine, task, chunk, on_overflow=on_overflow)),
            commit,
            sizer=sizer,
            budget=answering.options.budget,
            line=line,
        )
