"""One engine in one worker process: what a Ray actor of the pool runs (aisql.executor.cluster.pool).

A plain class, so it runs (and is tested) without Ray; the pool wraps it with `ray.remote`. The
worker loads the model once and keeps it — and its prefix KV cache — for the pool's life: across
the AI nodes of a query and the queries of a connection.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Sequence

from aisql.engine.base import EngineStats, GenerateRequest, ModelInfo, ScoreRequest
from aisql.engine.model.resolving import ResolvedModel, on_this_node
from aisql.engine.options import EngineOptions
from aisql.executor.store.answer_store import Answer, AnswerColumns
from aisql.executor.answers.evaluate import answer_prepared, prepare
from aisql.executor.answers.request_kinds import Prepared
from aisql.functions import Task


@dataclass(frozen=True)
class WorkerInfo:
    model: ModelInfo  # the loaded engine's own: name, device, fingerprint, ...
    host: str
    pid: int
    load_s: float


@dataclass
class ShardResult:
    answers: dict[str, Answer] | AnswerColumns  # run_texts: columns, in the order of the texts sent
    work: EngineStats  # what the engine computed for this shard
    busy_s: float
    truncated: int = 0  # run_texts: prompts cut to fit the context (--on-overflow truncate)


class EngineWorker:
    def __init__(self, model: ResolvedModel, options: EngineOptions, threads: int | None = None) -> None:
        """`model`: the model the driver resolved (used as it is where its files are on this node,
        else resolved again by name here); `threads`: torch's intra-op threads on CPU (one per CPU
        the actor holds)."""
        if threads:
            import torch

            torch.set_num_threads(threads)
        from aisql.engine.model.loader import load_resolved

        started = time.perf_counter()
        self.engine = load_resolved(on_this_node(model), options)
        self.load_s = time.perf_counter() - started

    def describe(self) -> WorkerInfo:
        """Who this worker is: the driver checks the fingerprint before any answer is stored."""
        return WorkerInfo(self.engine.info, socket.gethostname(), os.getpid(), round(self.load_s, 3))

    def run_shard(self, task: Task, items: Sequence[Prepared]) -> ShardResult:
        """Answers of one shard, as the single engine would give them (same batching code)."""
        before = self.engine.stats.copy()
        started = time.perf_counter()
        answers = answer_prepared(self.engine, task, items)
        busy = time.perf_counter() - started
        return ShardResult(answers, self.engine.stats.since(before), busy)

    def run_texts(self, task: Task, texts: Sequence[str], on_overflow: str = "error") -> ShardResult:
        """Answers of one streamed shard: prompt texts, encoded here (chat template, tokenizer) —
        the work a streamed node keeps off the driver — then run as run_shard runs them."""
        before = self.engine.stats.copy()
        started = time.perf_counter()
        items = prepare(self.engine, task, texts, on_overflow=on_overflow)
        answers = answer_prepared(self.engine, task, items)
        busy = time.perf_counter() - started
        columns = AnswerColumns.of([answers[t] for t in texts])
        return ShardResult(columns, self.engine.stats.since(before), busy, sum(1 for p in items if p.truncated))

    def score(self, requests: Sequence[ScoreRequest], reuse: bool) -> tuple[list, EngineStats]:
        before = self.engine.stats.copy()
        return self.engine.score(requests, reuse=reuse), self.engine.stats.since(before)

    def generate(self, requests: Sequence[GenerateRequest], reuse: bool, speculative: bool) -> tuple[list, EngineStats]:
        before = self.engine.stats.copy()
        return self.engine.generate(requests, reuse=reuse, speculative=speculative), self.engine.stats.since(before)

    def reset_cache(self) -> None:
        self.engine.reset_cache()
