"""Continuous batching for interactive requests, on the same engine (weights, radix KV cache) as
the batch AI-SQL path.

One engine thread loops over steps, each schedule -> execute -> update (as vLLM v1's engine core):
1. `scheduler.schedule()` plans the step from the requests' states it owns (waiting,
   prefilling, running): requests to drop, the prompt chunks that fit the step's token budget
   beside every running request's decode (aisql.engine.continuous.scheduler);
2. `execute(plan)` runs it on the engine (a `ServingBackend`) in **one forward pass** where the
   model's attention is plain (aisql.engine.continuous.mixed_pass): every running request's last
   token and speculative draft (greedy ones verify prompt-lookup drafts, sampled ones draw one
   token) together with the prompt chunks, each request's KV in its own buffers
   (aisql.engine.continuous.sequence_kv), a prompt's cached prefix copied from the radix tree
   once when it starts. A prompt whose last chunk ran picks its first token and decodes from the
   next step; tokens go to each request's sink; finished requests leave (their prompt + output KV
   kept in the tree: a conversation's next turn computes only its new tokens). Models whose
   attention the mixed pass does not cover (sliding windows, soft-capping) run the chunks and
   then one decode pass over a padded batch cache (`SeparatePasses` below), as before;
3. `scheduler.update(result)` takes the step's outcome: the prompts still in progress, the
   requests now running.

Sinks only enqueue, so a slow client never holds the loop. The loop thread alone changes state;
other threads only submit and cancel. An error inside a step fails exactly the requests that
step touched; the loop goes on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from aisql.engine.base import EngineStats
from aisql.engine.continuous.backend import ServingBackend
from aisql.engine.continuous.mixed_pass import MixedPasses
from aisql.engine.continuous.next_token import choose_token, token_logprobs
from aisql.engine.continuous.request import FinishEvent, Prefilling, RequestHandle, Running, ServeRequest, Sink, TokenEvent
from aisql.engine.continuous.scheduler import ServingScheduler, StepPlan, StepResult
from aisql.engine.continuous.separate_passes import SeparatePasses
from aisql.engine.continuous.sequence_kv import SequenceKV
from aisql.engine.decoding.token_sampling import seeded_generator
from aisql.engine.options import DEFAULT_PASS_TOKENS


def _engine_counter(name: str) -> property:
    return property(lambda self: getattr(self.engine, name), doc=f"the engine's {name}")


@dataclass
class ServingStats:
    """Counts of the serving loop; the model's own work (tokens, drafts, passes, prefix hits) is
    counted once, by the engine, and read from it."""

    engine: EngineStats
    requests: int = 0
    finished: int = 0
    cancelled: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    running: int = 0
    waiting: int = 0
    mixed_passes: int = 0  # passes that carried decode rows and prompt tokens together

    prefix_hit_tokens = _engine_counter("kv_hit_tokens")
    generated_tokens = _engine_counter("generated_tokens")
    draft_tokens = _engine_counter("draft_tokens")
    draft_accepted_tokens = _engine_counter("draft_accepted_tokens")
    decode_passes = _engine_counter("decode_passes")


class ServingEngine:
    def __init__(
        self,
        engine: ServingBackend,
        *,
        max_running: int = 64,
        pass_tokens: int = DEFAULT_PASS_TOKENS,
        max_kv_tokens: int | None = None,
        mixed: bool | None = None,
    ) -> None:
        """`pass_tokens`: the token budget of one pass (decode rows first, prompt chunks after).
        `max_kv_tokens`: admit a request only while every admitted request's prompt + max_tokens
        fits in this many tokens of KV (default: as many as the prefix cache's memory budget
        holds); one request alone is always admitted. `mixed`: one pass for decode and prompt
        chunks (default: wherever the engine's attention allows it)."""
        self.engine = engine
        self.runner = engine.runner
        per_token = max(1, self.runner.bytes_per_token)
        self.max_kv_tokens = max_kv_tokens or max(engine.info.max_context, engine.kv_budget_bytes // per_token)
        self.mixed = engine.mixed_passes if mixed is None else (mixed and engine.mixed_passes)
        self.scheduler = ServingScheduler(
            max_running=max_running,
            pass_tokens=pass_tokens,
            max_kv_tokens=self.max_kv_tokens,
            cached_prefix=engine.cached_prefix_length,
        )
        self.passes = MixedPasses(self) if self.mixed else SeparatePasses(self)  # the strategy, chosen once
        self.stats = ServingStats(engine.stats)
        self._inbox: list[RequestHandle] = []
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="aisql-serving", daemon=True)
        self._thread.start()

    # ---- other threads ---------------------------------------------------------------------
    def submit(self, request: ServeRequest, sink: Sink, session: str | None = None) -> RequestHandle:
        """Queue a request; its tokens go to `sink`. `session` (the conversation the client named)
        matters only to a router in front of several engines: one engine's prefix cache finds a
        conversation's turns by their tokens, so it is accepted and not used here."""
        del session
        if not request.prompt_ids:
            raise ValueError("the prompt is empty")
        if len(request.prompt_ids) + request.max_tokens > self.engine.info.max_context:
            raise ValueError(
                f"the prompt ({len(request.prompt_ids)} tokens) plus max_tokens ({request.max_tokens}) "
                f"exceeds the model's context of {self.engine.info.max_context} tokens"
            )
        handle = RequestHandle(request, sink)
        with self._cond:
            self._inbox.append(handle)
            self.stats.requests += 1
            self._cond.notify()
        return handle

    def close(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(timeout=30)

    # ---- the loop --------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cond:
                while not (self._inbox or self.scheduler.has_work or self._stopped):
                    self._cond.wait()
                if self._stopped:
                    break
                self.scheduler.add(self._inbox)
                self._inbox.clear()
            plan = self.scheduler.schedule()
            try:
                with self.engine.lock, torch.inference_mode():
                    result = self.execute(plan)
                    self.engine.sync_cache_stats()
            except Exception as err:  # noqa: BLE001 - the requests of this step learn why; the loop goes on
                result = self._fail_step(plan, f"{type(err).__name__}: {err}")
            self.scheduler.update(result)
            self.stats.running = len(self.scheduler.running)
            self.stats.waiting = len(self.scheduler.waiting) + len(self.scheduler.prefilling)

    def execute(self, plan: StepPlan) -> StepResult:
        """Run one planned step — retire, start prompts, then the pass (or passes) — sending
        tokens to the requests."""
        for handle in plan.finish_unstarted:
            self._finish_unstarted(handle)
        if plan.retire:
            self._retire(plan.retire)
        self._start([state for state, _ in plan.chunks if state.cache is None])
        self.passes.run(plan.chunks)
        prefilling = [s for s in self.scheduler.prefilling if s.done < len(s.handle.request.prompt_ids)]
        return StepResult(prefilling=prefilling, running=[sequence.handle for sequence in self.rows])

    @property
    def rows(self) -> list[Running]:
        """The decoding requests, in row order."""
        return self.passes.rows

    def _fail_step(self, plan: StepPlan, message: str) -> StepResult:
        """Fail the requests the failed step touched (the scheduler says which); waiting requests
        are untouched. Nothing is left running or prefilling."""
        for handle in self.scheduler.touched(plan):
            if not handle.finished:
                self.stats.failed += 1
                handle.finish(FinishEvent("error", len(handle.request.prompt_ids), 0, 0, error=message))
        self.passes.clear()
        return StepResult(prefilling=[], running=[])

    # ---- prompts ---------------------------------------------------------------------------
    def _start(self, states: list[Prefilling]) -> None:
        """Prompts starting this step: the uncached prefixes two or more of them share computed
        once, then each one's cached prefix read into its own KV."""
        if not states:
            return
        if len(states) > 1:
            self.engine.share_prefixes([s.handle.request.prompt_ids for s in states], [s.handle.request.cache_salt for s in states])
        layers = self.runner.model.config.num_hidden_layers
        for state in states:
            request = state.handle.request
            if self.mixed:
                state.cache = SequenceKV(layers, request.kv_need)
                cached = state.cache.seed(self.engine.cached_prefix_pieces(request.prompt_ids, request.cache_salt))
            else:
                state.cache, cached = self.engine.start_sequence(request.prompt_ids, request.cache_salt)
            state.done = state.cached = cached
            self.stats.prompt_tokens += len(request.prompt_ids)

    def prompt_done(self, state: Prefilling, logits: torch.Tensor, kv_of, kv: SequenceKV | None) -> Running | None:
        """The whole prompt is in: keep its KV for later turns, pick the first token; the request
        to decode from the next step, or None when that token already ended it."""
        prompt = state.handle.request.prompt_ids
        self.engine.store_sequence(prompt, kv_of, state.handle.request.cache_salt)
        sequence = self._running(state.handle, state.cached, kv)
        return None if self._first_token(sequence, logits) else sequence

    def _running(self, handle: RequestHandle, cached: int, kv: SequenceKV | None = None) -> Running:
        request = handle.request
        speculate = request.greedy and request.speculative and self.engine.speculation is not None
        return Running(
            handle=handle,
            position=len(request.prompt_ids),
            cached=cached,
            drafts=self.engine.drafter(list(request.prompt_ids)) if speculate else None,
            generator=seeded_generator(request.seed, self.runner.device),
            kv=kv,
        )

    def _first_token(self, sequence: Running, logits: torch.Tensor) -> bool:
        """Choose and send the token after the prompt; True if that already ends the request."""
        token, logprob, top = choose_token(sequence, logits)
        return self._emit(sequence, [token], [logprob] if logprob is not None else None, [top] if top is not None else None)

    def _finish_unstarted(self, handle: RequestHandle) -> None:
        self.stats.cancelled += 1
        handle.finish(FinishEvent("cancelled", len(handle.request.prompt_ids), 0, 0))

    def _retire(self, rows: Sequence[int]) -> None:
        for row in rows:
            sequence = self.rows[row]
            self.stats.cancelled += 1
            sequence.handle.finish(sequence.finish_event("cancelled"))
        gone = set(rows)
        self.passes.keep([row for row in range(len(self.rows)) if row not in gone])

    def draft(self, sequence: Running) -> list[int]:
        if sequence.drafts is None:
            return []
        return sequence.drafts.propose(sequence.request.max_tokens - len(sequence.outputs) - 1)

    def deliver(self, sequence: Running, tokens: list[int], logits: torch.Tensor, stored_kv: Callable[[int], Callable]) -> bool:
        """Send a decode step's tokens (with their logprobs when asked; `logits` [n, vocab] the
        step's rows); a finished request's prompt + output KV (`stored_kv(count)` gives the
        `(start, end) -> KV` reader of its first `count` tokens) is kept for the next turn.
        True if the request finished."""
        logprobs = tops = None
        if sequence.request.logprobs is not None:
            scored = [token_logprobs(logits[j], token, sequence.request.logprobs) for j, token in enumerate(tokens)]
            logprobs, tops = [s[0] for s in scored], [s[1] for s in scored]
        if not self._emit(sequence, tokens, logprobs, tops):
            return False
        # Keep prompt + output (but its last token, never run) for the conversation's next turn.
        stored = list(sequence.request.prompt_ids) + sequence.outputs[:-1]
        self.engine.store_sequence(stored, stored_kv(len(stored)), sequence.request.cache_salt)
        return True

    # ---- tokens out ------------------------------------------------------------------------
    def _emit(self, sequence: Running, tokens: list[int], logprobs, tops) -> bool:
        """Send the tokens up to a stop token or max_tokens; True if the request is finished."""
        handle = sequence.handle
        out: list[int] = []
        finish = None
        for token in tokens:
            if token in self.engine.stop_ids:
                finish = "stop"
                break
            out.append(token)
            if len(sequence.outputs) + len(out) >= sequence.request.max_tokens:
                finish = "length"
                break
        now = time.perf_counter()
        if out:
            if handle.times.first_token is None:
                handle.times.first_token = now
            handle.times.token_times.extend([now] * len(out))
            sequence.outputs.extend(out)
            if sequence.drafts is not None:
                sequence.drafts.extend(out)
            handle.sink(TokenEvent(out, logprobs[: len(out)] if logprobs else None, tops[: len(out)] if tops else None))
        elif handle.times.first_token is None:
            handle.times.first_token = now
        self.engine.stats.generated_tokens += len(out) + (finish == "stop")
        sequence.feed = out[-1] if out else -1
        if finish is None:
            return False
        self.stats.finished += 1
        handle.finish(sequence.finish_event(finish))
        return True


