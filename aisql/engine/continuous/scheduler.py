"""Which requests advance in the next step, as a plain plan (after vLLM v1's scheduler: it
decides, the loop executes, nothing here touches the model or the KV).

Each step prefills at most `prefill_chunk` prompt tokens — the next chunk of a long prompt in
progress, then as many waiting requests as fit, prefilled together in one batched pass; a
request too long to fit starts a chunked prefill — and decodes every running request once.
Admission is first come, first served, bounded by `max_running` requests and by the KV tokens
(prompt + max_tokens) of the running ones; one request alone is always admitted.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from aisql.engine.continuous.request import Prefilling, RequestHandle, Running


@dataclass
class StepPlan:
    finish_unstarted: list[RequestHandle] = field(default_factory=list)  # cancelled before they started
    retire: list[int] = field(default_factory=list)  # running rows whose request was cancelled
    start_chunked: RequestHandle | None = None  # begins a chunked prefill this step
    chunk_tokens: int = 0  # prompt tokens of the chunked prefill to run this step
    prefill: list[RequestHandle] = field(default_factory=list)  # prefilled together in one pass
    decode: bool = True  # one decode pass over the running requests (after the prefills join)


class ServingScheduler:
    def __init__(
        self, *, max_running: int, prefill_chunk: int, max_kv_tokens: int, cached_prefix: Callable[[Sequence[int], str | None], int]
    ) -> None:
        """`cached_prefix(prompt, salt)`: prompt tokens the prefix cache would serve it now."""
        self.max_running = max_running
        self.prefill_chunk = prefill_chunk
        self.max_kv_tokens = max_kv_tokens
        self.cached_prefix = cached_prefix
        self.waiting: deque[RequestHandle] = deque()
        self.prefilling: Prefilling | None = None  # set by the loop when a chunked prefill starts

    @property
    def has_work(self) -> bool:
        return bool(self.waiting) or self.prefilling is not None

    def schedule(self, running: Sequence[Running]) -> StepPlan:
        plan = StepPlan(retire=[row for row, sequence in enumerate(running) if sequence.handle.cancelled])
        budget = self.prefill_chunk
        if self.prefilling is not None:
            if self.prefilling.handle.cancelled:
                plan.finish_unstarted.append(self.prefilling.handle)
                self.prefilling = None
            else:
                plan.chunk_tokens = min(budget, len(self.prefilling.handle.request.prompt_ids) - self.prefilling.done)
                budget -= plan.chunk_tokens
        reserved = sum(s.request.kv_need for row, s in enumerate(running) if row not in plan.retire)
        rows = len(running) - len(plan.retire)
        while budget > 0 and self.waiting and self.prefilling is None and plan.start_chunked is None and rows + len(plan.prefill) < self.max_running:
            handle = self.waiting[0]
            if handle.cancelled:
                plan.finish_unstarted.append(self.waiting.popleft())
                continue
            need = handle.request.kv_need
            if reserved and reserved + need > self.max_kv_tokens:
                break  # waits (in order) until running requests finish and free their KV
            reserved += need
            prompt = handle.request.prompt_ids
            tail = len(prompt) - self.cached_prefix(prompt, handle.request.cache_salt)
            if tail <= budget:
                plan.prefill.append(self.waiting.popleft())
                budget -= tail
            elif plan.prefill:
                break  # it starts next step
            else:
                plan.start_chunked = self.waiting.popleft()
                plan.chunk_tokens = min(budget, tail)
        return plan
