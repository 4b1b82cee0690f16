"""Which requests advance in the next step, as a plain plan (after vLLM v1's scheduler: it
decides and keeps the requests' states, the loop executes, nothing here touches the model or
the KV).

The scheduler owns the requests' states: `waiting` (submitted, in arrival order), `prefilling`
(a long prompt prefilled chunk by chunk) and `running` (the decode batch, in the order of its
rows). Each step the loop asks `schedule()` for a `StepPlan`, executes it, and hands back a
`StepResult` that `update()` applies: that is the only way states change besides `add`.

Each step prefills at most `prefill_chunk` prompt tokens — the next chunk of a long prompt in
progress, then as many waiting requests as fit, prefilled together in one batched pass; a
request too long to fit starts a chunked prefill — and decodes every running request once.
Admission is first come, first served, bounded by `max_running` requests and by the KV tokens
(prompt + max_tokens) of the running ones; one request alone is always admitted.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from aisql.engine.continuous.request import Prefilling, RequestHandle


@dataclass
class StepPlan:
    finish_unstarted: list[RequestHandle] = field(default_factory=list)  # cancelled before they started
    retire: list[int] = field(default_factory=list)  # running rows whose request was cancelled
    start_chunked: RequestHandle | None = None  # begins a chunked prefill this step
    chunk: Prefilling | None = None  # the chunked prefill in progress, advanced by chunk_tokens
    chunk_tokens: int = 0  # prompt tokens of the chunked prefill to run this step
    prefill: list[RequestHandle] = field(default_factory=list)  # prefilled together in one pass
    # Every step then decodes the running batch once (after the prefills join it).


@dataclass
class StepResult:
    """What an executed step left behind, for `ServingScheduler.update`."""

    prefilling: Prefilling | None  # the chunked prefill still in progress
    running: list[RequestHandle]  # the decode batch's requests, in row order


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
        self.prefilling: Prefilling | None = None
        self.running: list[RequestHandle] = []

    @property
    def has_work(self) -> bool:
        return bool(self.waiting) or self.prefilling is not None or bool(self.running)

    def add(self, handles: Iterable[RequestHandle]) -> None:
        self.waiting.extend(handles)

    def update(self, result: StepResult) -> None:
        self.prefilling = result.prefilling
        self.running = list(result.running)

    def touched(self, plan: StepPlan) -> list[RequestHandle]:
        """The requests a step of `plan` works on (a failed step fails them): the running batch,
        the prefill in progress or starting, the requests prefilled together. Not the waiting."""
        touched = list(self.running) + list(plan.prefill)
        if self.prefilling is not None:
            touched.append(self.prefilling.handle)
        if plan.start_chunked is not None:
            touched.append(plan.start_chunked)
        return touched

    def schedule(self) -> StepPlan:
        plan = StepPlan(retire=[row for row, handle in enumerate(self.running) if handle.cancelled])
        budget = self.prefill_chunk
        if self.prefilling is not None:
            if self.prefilling.handle.cancelled:
                plan.finish_unstarted.append(self.prefilling.handle)
                self.prefilling = None
            else:
                plan.chunk = self.prefilling
                plan.chunk_tokens = min(budget, len(self.prefilling.handle.request.prompt_ids) - self.prefilling.done)
                budget -= plan.chunk_tokens
        reserved = sum(h.request.kv_need for row, h in enumerate(self.running) if row not in plan.retire)
        rows = len(self.running) - len(plan.retire)
        while budget > 0 and self.waiting and plan.chunk is None and plan.start_chunked is None and rows + len(plan.prefill) < self.max_running:
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
