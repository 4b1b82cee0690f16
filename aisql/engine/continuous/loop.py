"""Continuous batching for interactive requests, on the same engine (weights, radix KV cache) as
the batch AI-SQL path.

One engine thread loops over steps, each schedule -> execute -> update (as vLLM v1's engine core):
1. `scheduler.schedule()` plans the step from the requests' states it owns (waiting,
   prefilling, running): requests to drop, a chunk of a long prompt, waiting requests to
   prefill together (aisql.engine.continuous.scheduler);
2. `execute(plan)` runs it on the engine (a `ServingBackend`): the prefills (each from the
   deepest prefix the radix tree holds, their KV stored for the next turn), then one decode pass
   over every running request (greedy ones verify prompt-lookup drafts in it, sampled ones draw
   one token: aisql.engine.decoding.decode); tokens go to each request's sink, finished ones
   leave the batch (their prompt + output KV kept in the tree: a conversation's next turn
   computes only its new tokens);
3. `scheduler.update(result)` takes the step's outcome: the prefill still in progress, the
   requests now running.

Sinks only enqueue, so a slow client never holds the loop. The loop thread alone changes state;
other threads only submit and cancel. An error inside a step fails exactly the requests that
step touched; the loop goes on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from aisql.engine.base import EngineStats
from aisql.engine.decoding.decode import DecodeRow, decode_pass, greedy_accept, settle
from aisql.engine.continuous.backend import ServingBackend
from aisql.engine.continuous.batch import RunningBatch
from aisql.engine.continuous.request import FinishEvent, Prefilling, RequestHandle, Running, ServeRequest, Sink, TokenEvent
from aisql.engine.decoding.token_sampling import seeded_generator
from aisql.engine.continuous.next_token import choose_token, token_logprobs
from aisql.engine.continuous.scheduler import ServingScheduler, StepPlan, StepResult


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

    prefix_hit_tokens = _engine_counter("kv_hit_tokens")
    generated_tokens = _engine_counter("generated_tokens")
    draft_tokens = _engine_counter("draft_tokens")
    draft_accepted_tokens = _engine_counter("draft_accepted_tokens")
    decode_passes = _engine_counter("decode_passes")


class ServingEngine:
    def __init__(
        self, engine: ServingBackend, *, max_running: int = 64, prefill_chunk: int = 2048, max_kv_tokens: int | None = None
    ) -> None:
        """`max_kv_tokens`: admit a request only while every running request's prompt + max_tokens
        fits in this many tokens of KV (default: as many as the prefix cache's memory budget holds);
        one request alone is always admitted."""
        self.engine = engine
        self.runner = engine.runner
        per_token = max(1, self.runner.bytes_per_token)
        self.max_kv_tokens = max_kv_tokens or max(engine.info.max_context, engine.kv_budget_bytes // per_token)
        self.scheduler = ServingScheduler(
            max_running=max_running,
            prefill_chunk=prefill_chunk,
            max_kv_tokens=self.max_kv_tokens,
            cached_prefix=engine.cached_prefix_length,
        )
        self.batch = RunningBatch(self.runner)
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
            self.stats.waiting = len(self.scheduler.waiting) + (self.scheduler.prefilling is not None)

    def execute(self, plan: StepPlan) -> StepResult:
        """Run one planned step — retire, prefill, decode — sending tokens to the requests."""
        for handle in plan.finish_unstarted:
            self._finish_unstarted(handle)
        if plan.retire:
            self._retire(plan.retire)
        prefilling = plan.chunk
        if plan.start_chunked is not None:
            prefilling = self._start_chunked(plan.start_chunked)
        if plan.chunk_tokens and prefilling is not None and self._prefill_chunk(prefilling, plan.chunk_tokens):
            prefilling = None  # the whole prompt is in: it joined the batch (or already finished)
        if plan.prefill:
            self._prefill_together(plan.prefill)
        if self.batch.rows:
            self._decode()
        return StepResult(prefilling=prefilling, running=[sequence.handle for sequence in self.batch.rows])

    def _fail_step(self, plan: StepPlan, message: str) -> StepResult:
        """Fail the requests the failed step touched (the scheduler says which); waiting requests
        are untouched. Nothing is left running or prefilling."""
        for handle in self.scheduler.touched(plan):
            if not handle.finished:
                self.stats.failed += 1
                handle.finish(FinishEvent("error", len(handle.request.prompt_ids), 0, 0, error=message))
        self.batch = RunningBatch(self.runner)
        return StepResult(prefilling=None, running=[])

    # ---- prefill ---------------------------------------------------------------------------
    def _prefill_together(self, handles: list[RequestHandle]) -> None:
        """Prefill several prompts in one pass, pick their first tokens, join the batch."""
        out, cached = self.engine.prefill([h.request.prompt_ids for h in handles], [h.request.cache_salt for h in handles])
        rows = torch.arange(len(handles), device=self.runner.device)
        logits = self.runner.logits(out.hidden[rows, torch.tensor(out.lengths, device=self.runner.device) - 1])
        keep, joining = [], []
        for b, handle in enumerate(handles):
            self.stats.prompt_tokens += len(handle.request.prompt_ids)
            sequence = self._running(handle, cached[b])
            if not self._first_token(sequence, logits[b]):
                keep.append(b)
                joining.append(sequence)
        if not keep:
            return
        mask = out.mask
        if len(keep) < len(handles):
            index = torch.tensor(keep, device=self.runner.device)
            out.cache.batch_select_indices(index)
            mask = mask[index]
        self.batch.join(joining, out.cache, mask)

    def _start_chunked(self, handle: RequestHandle) -> Prefilling:
        cache, cached = self.engine.start_sequence(handle.request.prompt_ids, handle.request.cache_salt)
        self.stats.prompt_tokens += len(handle.request.prompt_ids)
        return Prefilling(handle, cache, cached, cached)

    def _prefill_chunk(self, state: Prefilling, tokens: int) -> bool:
        """Run the next `tokens` of a chunked prefill; True when the whole prompt is in."""
        prompt = state.handle.request.prompt_ids
        end = min(len(prompt), state.done + tokens)
        ids = torch.tensor([prompt[state.done : end]], device=self.runner.device)
        positions = torch.arange(state.done, end, device=self.runner.device).unsqueeze(0)
        hidden = self.runner.forward(ids, state.cache, position_ids=positions)
        self.runner.count(end - state.done, state.done)
        state.done = end
        if end < len(prompt):
            return False
        # The whole prompt is in: keep its KV for later turns, pick the first token, join the batch.
        layers = state.cache.layers
        self.engine.store_sequence(
            prompt,
            lambda start, stop: [(layer.keys[0, :, start:stop].clone(), layer.values[0, :, start:stop].clone()) for layer in layers],
            state.handle.request.cache_salt,
        )
        sequence = self._running(state.handle, state.cached)
        if not self._first_token(sequence, self.runner.logits(hidden[:, -1])[0]):
            self.batch.join([sequence], state.cache, torch.ones((1, len(prompt)), dtype=torch.long, device=self.runner.device))
        return True

    def _running(self, handle: RequestHandle, cached: int) -> Running:
        request = handle.request
        speculate = request.greedy and request.speculative and self.engine.speculation is not None
        return Running(
            handle=handle,
            position=len(request.prompt_ids),
            cached=cached,
            drafts=self.engine.drafter(list(request.prompt_ids)) if speculate else None,
            generator=seeded_generator(request.seed, self.runner.device),
        )

    def _first_token(self, sequence: Running, logits: torch.Tensor) -> bool:
        """Choose and send the token after the prompt; True if that already ends the request."""
        token, logprob, top = choose_token(sequence, logits)
        return self._emit(sequence, [token], [logprob] if logprob is not None else None, [top] if top is not None else None)

    def _finish_unstarted(self, handle: RequestHandle) -> None:
        self.stats.cancelled += 1
        handle.finish(FinishEvent("cancelled", len(handle.request.prompt_ids), 0, 0))

    # ---- decode ----------------------------------------------------------------------------
    def _retire(self, rows: Sequence[int]) -> None:
        for row in rows:
            sequence = self.batch.rows[row]
            self.stats.cancelled += 1
            sequence.handle.finish(sequence.finish_event("cancelled"))
        gone = set(rows)
        self.batch.keep([row for row in range(len(self.batch.rows)) if row not in gone])

    def _decode(self) -> None:
        batch = self.batch
        rows = [
            DecodeRow(s.feed, s.position, s.drafts.propose(s.request.max_tokens - len(s.outputs) - 1) if s.drafts else [])
            for s in batch.rows
        ]
        out = decode_pass(self.runner, batch.cache, batch.mask, rows)
        batch.mask = out.mask
        chosen, accepted = [], []
        for index, (sequence, row) in enumerate(zip(batch.rows, rows)):
            if sequence.request.greedy:
                tokens, kept = greedy_accept(row.draft, out.logits[index])
            else:
                tokens, kept = [choose_token(sequence, out.logits[index, 0])[0]], 0
            if sequence.drafts is not None:
                sequence.drafts.feedback(len(row.draft), kept)
            chosen.append(tokens)
            accepted.append(kept)
        settle(self.runner, self.engine.stats, out, rows, accepted)
        keep = []
        for index, (sequence, row, tokens) in enumerate(zip(batch.rows, rows, chosen)):
            sequence.position = row.position
            logprobs = tops = None
            if sequence.request.logprobs is not None:
                scored = [token_logprobs(out.logits[index, j], token, sequence.request.logprobs) for j, token in enumerate(tokens)]
                logprobs, tops = [s[0] for s in scored], [s[1] for s in scored]
            if self._emit(sequence, tokens, logprobs, tops):
                # Keep prompt + output (but its last token, never run) for the conversation's next turn.
                stored = list(sequence.request.prompt_ids) + sequence.outputs[:-1]
                self.engine.store_sequence(stored, batch.row_kv(index, len(stored)), sequence.request.cache_salt)
            else:
                keep.append(index)
        batch.keep(keep)

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


