"""The values the answering strategies and their callers pass each other: how a run answers
(`RunOptions`) and what answering did (`AnswerCounts`).

A leaf: it imports no strategy, so the local chunk loop (aisql.executor.answers.answering), the sharded
and streamed pool paths (aisql.executor.cluster.sharded, aisql.executor.cluster.streaming) and the node
runtimes all import it, and none of them imports another to reach it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from aisql.engine.base import EngineStats
from aisql.executor.options.budget import Budget
from aisql.executor.options.run_options import BY_NAME, RunRequest, refuse_unknown
from aisql.executor.report.progress import NoProgress, Progress
from aisql.executor.report.run_stats import ANSWER_COUNTS, add_worker_counts
from aisql.planner.approximation import Targets, call_targets


@dataclass
class RunOptions:
    """How a run evaluates prompts: the user's options as given (`request`: every option declared
    in aisql.executor.options.run_options, read here by its name — `options.checkpoint_every`)
    and what the run built from them: its budget, progress, approximate-mode targets and models."""

    request: RunRequest = field(default_factory=RunRequest)
    budget: Budget | None = None
    progress: Progress = field(default_factory=NoProgress)
    approximate: "Targets | None" = None  # approximate mode for every AI.IF of the run (--approximate)
    embeddings: object | None = None  # the embedding model (a ModelSession): the cascade's proxy reads it
    proxies: object | None = None  # the run's ModelSession: chooses and loads a cascade's proxy LLM

    def __getattr__(self, name: str):
        """A declared run option not built into a field above: the user's value (or its default)."""
        if name in BY_NAME:
            return getattr(self.request, name)
        raise AttributeError(name)

    @classmethod
    def of(cls, **values) -> "RunOptions":
        """Options from keywords: declared run options (checked when the request is built) and
        this class's own fields (budget, progress, ...)."""
        own = {f.name for f in dataclasses.fields(cls)} - {"request"}
        refuse_unknown({k: v for k, v in values.items() if k not in own}, also=tuple(own))
        request = RunRequest(**{k: v for k, v in values.items() if k not in own})
        return cls(request, **{k: v for k, v in values.items() if k in own})

    def targets_for(self, call) -> "Targets | None":
        """The approximate-mode targets of a call: its own options, else the run's, else None (exact)."""
        return call_targets(call.function.approximates, call.hints, self.approximate)


@dataclass
class AnswerCounts:
    """What answering did, returned to the caller: prompts as naive execution counts them, what
    the model ran (`work`), and per worker on a pool."""

    prompts_total: int = 0  # rows with a prompt
    prompts_unique: int = 0  # of those, texts new to the caller
    prompts_cached: int = 0  # new texts answered from the result cache
    prompts_evaluated: int = 0  # texts sent to the model
    prompts_truncated: int = 0
    logical_tokens: int = 0  # what naive execution would run
    work: EngineStats = field(default_factory=EngineStats)
    workers: dict[str, dict] = field(default_factory=dict)  # on a pool: shards / prompts / computed tokens / busy s

    def __add__(self, other: "AnswerCounts | None") -> "AnswerCounts":
        total = dataclasses.replace(self, work=self.work.copy(), workers={k: dict(v) for k, v in self.workers.items()})
        if other is not None:
            total += other
        return total

    def __iadd__(self, other: "AnswerCounts") -> "AnswerCounts":
        for name in ANSWER_COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.work = self.work + other.work
        add_worker_counts(self.workers, other.workers)
        return self
