"""What a serving request is: its parameters, the events it produces, the handle its submitter
keeps, and its state while it runs."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from aisql.engine.decoding.speculative import NgramIndex

_IDS = itertools.count(1)


@dataclass(frozen=True)
class ServeRequest:
    prompt_ids: tuple[int, ...]
    max_tokens: int
    temperature: float = 0.0  # 0: greedy (speculation applies)
    top_p: float = 1.0
    seed: int | None = None
    logprobs: int | None = None  # None: none; k: each token's logprob and its top-k alternatives
    speculative: bool = True
    # vLLM's extension: choose only among these tokens. Logprobs stay those of the full
    # distribution, so a one-token request for an allowed token reports log P(token | prompt).
    allowed_token_ids: tuple[int, ...] | None = None
    # The prefix-cache partition: requests share cached KV only with requests of the same salt
    # (None: the shared cache). The server sets it per API key or from the request's cache_salt.
    cache_salt: str | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 and self.allowed_token_ids is None

    @property
    def kv_need(self) -> int:
        """Tokens of KV the request holds at most: its prompt and every token it may generate."""
        return len(self.prompt_ids) + self.max_tokens


@dataclass
class TokenEvent:
    """Tokens a request produced in one pass (one, or several when drafts were accepted)."""

    token_ids: list[int]
    logprobs: list[float] | None = None
    top_logprobs: list[dict[int, float]] | None = None


@dataclass
class FinishEvent:
    finish_reason: str  # "stop" | "length" | "cancelled" | "error"
    prompt_tokens: int
    cached_tokens: int  # prompt tokens read from the prefix cache
    completion_tokens: int
    error: str | None = None


Sink = Callable[[TokenEvent | FinishEvent], None]


@dataclass
class RequestTimes:
    submitted: float
    first_token: float | None = None
    token_times: list[float] = field(default_factory=list)


class RequestHandle:
    """What the submitter keeps: cancel() and the request's timings."""

    def __init__(self, request: ServeRequest, sink: Sink) -> None:
        self.id = next(_IDS)
        self.request = request
        self.sink = sink
        self.times = RequestTimes(time.perf_counter())
        self.cancelled = False
        self.finished = False  # a FinishEvent was sent: nothing more will be

    def cancel(self) -> None:
        """Stop generating (e.g. the client went away); the loop frees its KV at the next pass."""
        self.cancelled = True

    def finish(self, event: FinishEvent) -> None:
        """Send the request's last event, once."""
        if not self.finished:
            self.finished = True
            self.sink(event)


@dataclass
class Running:
    """A request in the decode batch: what it produced and where it stands."""

    handle: RequestHandle
    position: int  # position of the next token to feed
    cached: int  # prompt tokens read from the prefix cache
    drafts: NgramIndex | None  # prompt-lookup speculation (greedy requests)
    generator: torch.Generator | None  # seeded sampling
    outputs: list[int] = field(default_factory=list)
    feed: int = -1  # the last emitted token, not yet run through the model
    kv: object | None = None  # its own SequenceKV where passes are mixed (else a row of the batch cache)

    @property
    def request(self) -> ServeRequest:
        return self.handle.request

    def finish_event(self, reason: str, error: str | None = None) -> FinishEvent:
        return FinishEvent(reason, len(self.request.prompt_ids), self.cached, len(self.outputs), error=error)


@dataclass
class Prefilling:
    """A prompt being prefilled, a chunk per step (one chunk for a short one)."""

    handle: RequestHandle
    cache: object | None  # its own KV (a SequenceKV, or a DynamicCache on the separate-pass path); None until it starts
    done: int  # prompt tokens whose KV is in `cache`
    cached: int  # of those, read from the radix tree
