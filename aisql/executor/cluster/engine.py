"""ClusterEngine: the Engine interface over a pool of Ray workers.

Prompts are encoded here, on the driver, with the model's own tokenizer and prompt format read
from its files (no weights: aisql.engine.model.facts) — the ids every worker runs, as the fingerprint
check guarantees. Bulk work goes through `run_shards` (aisql.executor.cluster.sharded); the few single
calls of a run (naive rows, selectivity samples) go to one worker at a time. Engine counters are
the sum of what the workers report.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from aisql.engine.base import EngineStats, GenerateRequest, Generation, LabelScores, ModelFacts, ScoreRequest
from aisql.engine.model.prompt_format import EncodesPrompts
from aisql.executor.cluster.pool import WorkerPool
from aisql.executor.cluster.shards import PrefixLedger


class ClusterEngine(EncodesPrompts):
    reads_states = True  # every worker is the built-in engine
    def __init__(self, pool: WorkerPool, facts: ModelFacts) -> None:
        self.pool = pool
        self._facts = facts
        self.format = facts.format
        model = pool.info.model  # the first worker's; every worker's fingerprint was checked against the driver's
        self.info = dataclasses.replace(model, source=f"{pool.size} Ray workers", device=f"{pool.size} x {model.device} (Ray)")
        self.stats = EngineStats()
        self.ledger = PrefixLedger()  # which prompts each worker's cache holds: prefix work split
        pool.on_death = self.ledger.forget

    @property
    def workers(self) -> int:
        return self.pool.size

    def facts(self) -> ModelFacts:
        return self._facts

    def reset_cache(self) -> None:
        self.pool.broadcast("reset_cache")
        self.ledger.clear()

    def absorb(self, work: EngineStats) -> None:
        """Add a worker's counters to this engine's (EngineStats addition: levels take the largest)."""
        self.stats = self.stats + work

    def score(self, requests: Sequence[ScoreRequest], *, reuse: bool = True) -> list[LabelScores]:
        (results, work), worker = self.pool.call("score", list(requests), reuse)
        self._absorb_call(worker, work, requests, reuse)
        return results

    def generate(self, requests: Sequence[GenerateRequest], *, reuse: bool = True, speculative: bool = True) -> list[Generation]:
        (results, work), worker = self.pool.call("generate", list(requests), reuse, speculative)
        self._absorb_call(worker, work, requests, reuse)
        return results

    def _absorb_call(self, worker: str, work: EngineStats, requests, reuse: bool) -> None:
        if reuse:  # the worker's cache now holds these prompts too
            work.prefix_recompute_tokens = self.ledger.add(worker, [r.prompt_ids for r in requests])
        self.absorb(work)
