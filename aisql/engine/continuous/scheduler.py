"""Which requests advance in the next step, as a plain plan (after vLLM v1's scheduler: it
decides and keeps the requests' states, the loop executes, nothing here touches the model or
the KV).

The scheduler owns the requests' states: `waiting` (submitted, in arrival order), `prefilling`
(prompts being prefilled, chunk by chunk, in the order they started) and `running` (decoding, in
the order of their rows). Each step the loop asks `schedule()` for a `StepPlan`, executes it,
and hands back a `StepResult` that `update()` applies: that is the only way states change besides
`add`.

A step has a token budget, `pass_tokens` (Sarathi-Serve's and vLLM's token budget): every running
request decodes once (its token and drafts ride first), and the rest of the budget — at least a
quarter of it, so prompts always progress — goes to prompt chunks (a step with no request
decoding has the larger `idle_pass_tokens`: nobody waits on its length): the prompts in progress first,
in the order they started, then waiting requests, which start at once when there is room (a new
turn is not queued behind the decoding ones). Admission is first come, first served, bounded by
`max_running` requests (prefilling ones included) and by the KV tokens (prompt + max_tokens) of
the admitted ones; one request alone is always admitted.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from aisql.engine.continuous.request import Prefilling, RequestHandle


IDLE_PASS_TOKENS = 2048  # prompt tokens of a pass with no decoding request (the old prefill step's budget)


@dataclass
class StepPlan:
    finish_unstarted: list[RequestHandle] = field(default_factory=list)  # cancelled before they started
    retire: list[int] = field(default_factory=list)  # running rows whose request was cancelled
    # Prompt chunks to run this step: (state, up to this many prompt tokens). A state whose
    # `cache` is None starts here (its cached prefix is read first).
    chunks: list[tuple[Prefilling, int]] = field(default_factory=list)
    # Every step also decodes each running request once (in the same pass where the engine can).


@dataclass
class StepResult:
    """What an executed step left behind, for `ServingScheduler.update`."""

    prefilling: list[Prefilling]  # prompts still being prefilled, in order
    running: list[RequestHandle]  # the decoding requests, in row order


class ServingScheduler:
    def __init__(
        self,
        *,
        max_running: int,
        pass_tokens: int,
        max_kv_tokens: int,
        cached_prefix: Callable[[Sequence[int], str | None], int],
        idle_pass_tokens: int = IDLE_PASS_TOKENS,
    ) -> None:
        """`cached_prefix(prompt, salt)`: prompt tokens the prefix cache would serve it now.
        `idle_pass_tokens`: the budget of a pass no running request decodes in."""
        self.max_running = max_running
        self.pass_tokens = pass_tokens
        self.idle_pass_tokens = idle_pass_tokens
        self.max_kv_tokens = max_kv_tokens
        self.cached_prefix = cached_prefix
        self.waiting: deque[RequestHandle] = deque()
        self.prefilling: list[Prefilling] = []
        self.running: list[RequestHandle] = []

    @property
    def has_work(self) -> bool:
        return bool(self.waiting) or bool(self.prefilling) or bool(self.running)

    def add(self, handles: Iterable[RequestHandle]) -> None:
        self.waiting.extend(handles)

    def update(self, result: StepResult) -> None:
        self.prefilling = list(result.prefilling)
        self.running = list(result.running)

    def touched(self, plan: StepPlan) -> list[RequestHandle]:
        """The requests a step of `plan` works on (a failed step fails them): the running ones and
        every prompt in progress or starting. Not the waiting."""
        return list(self.running) + [state.handle for state in self.prefilling]

    def schedule(self) -> StepPlan:
        plan = StepPlan(retire=[row for row, handle in enumerate(self.running) if handle.cancelled])
        rows = len(self.running) - len(plan.retire)
        # The budget protects decoding requests from a long pass; with none decoding there is
        # nothing to protect, and prompts arriving together (agents' turns often do) are prefilled
        # in as few, full passes as the idle budget allows.
        budget = max(self.pass_tokens - rows, self.pass_tokens // 4) if rows else max(self.pass_tokens, self.idle_pass_tokens)
        in_progress = []
        for state in self.prefilling:
            if state.handle.cancelled:
                plan.finish_unstarted.append(state.handle)
                continue
            in_progress.append(state)
            left = len(state.handle.request.prompt_ids) - state.done
            if budget > 0:
                plan.chunks.append((state, min(budget, left)))
                budget -= plan.chunks[-1][1]
        self.prefilling = in_progress
        reserved = sum(h.request.kv_need for row, h in enumerate(self.running) if row not in plan.retire)
        reserved += sum(state.handle.request.kv_need for state in self.prefilling)
        while budget > 0 and self.waiting and rows + len(self.prefilling) < self.max_running:
            handle = self.waiting[0]
            if handle.cancelled:
                plan.finish_unstarted.append(self.waiting.popleft())
                continue
            need = handle.request.kv_need
            if reserved and reserved + need > self.max_kv_tokens:
                break  # waits (in order) until running requests finish and free their KV
            reserved += need
            self.waiting.popleft()
            prompt = handle.request.prompt_ids
            state = Prefilling(handle, None, 0, 0)
            self.prefilling.append(state)
            tail = len(prompt) - self.cached_prefix(prompt, handle.request.cache_salt)
            plan.chunks.append((state, min(budget, tail)))
            budget -= plan.chunks[-1][1]
        return plan
