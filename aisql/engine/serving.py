"""Continuous batching for interactive requests, on the same engine (weights, radix KV cache) as
the batch AI-SQL path.

One engine thread runs a loop of iterations. Each iteration
1. prefills new requests — at most `prefill_chunk` tokens in all, so a long new context is
   prefilled over several iterations while the running requests keep decoding — each from the
   deepest prefix the radix tree holds (a new turn of a conversation computes only its new
   tokens), and stores the prompt's KV in the tree for the next turn;
2. runs one decode pass over every running request: greedy requests verify prompt-lookup drafts
   in the same pass (lossless), sampled ones draw one token;
3. streams the new tokens to each request's sink and retires finished or cancelled requests,
   keeping their whole sequence (prompt + output) in the tree and freeing their batch KV.

New requests join the running batch between passes: their KV is appended as new rows (padded to
the batch's slot count; masks and explicit positions keep every row exact). Sinks are callbacks
that only enqueue, so a slow client never holds the loop. Like vLLM's v1 engine core, the loop
owns all state; other threads only submit and cancel.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from aisql.engine.hf import HFEngine
from aisql.engine.model_runner import Row
from aisql.engine.radix import LayerKV
from aisql.engine.scheduler import Work
from aisql.engine.speculative import NgramIndex, accepted_length  # drafts: engine.drafter (prompt lookup)

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

    def cancel(self) -> None:
        """Stop generating (e.g. the client went away); the loop frees its KV at the next pass."""
        self.cancelled = True


@dataclass
class ServingStats:
    requests: int = 0
    finished: int = 0
    cancelled: int = 0
    prompt_tokens: int = 0
    prefix_hit_tokens: int = 0
    generated_tokens: int = 0
    draft_tokens: int = 0
    draft_accepted_tokens: int = 0
    decode_passes: int = 0
    running: int = 0
    waiting: int = 0


@dataclass
class _Prefill:
    handle: RequestHandle
    cache: object
    done: int  # prompt tokens whose KV is in `cache`
    cached: int  # of those, read from the radix tree


@dataclass
class _Sequence:
    handle: RequestHandle
    outputs: list[int]
    position: int  # position of the next token to feed
    feed: int  # the last emitted token, not yet run through the model
    cached: int
    drafts: NgramIndex | None
    generator: torch.Generator | None


class ServingEngine:
    def __init__(
        self, engine: HFEngine, *, max_running: int = 64, prefill_chunk: int = 2048, max_kv_tokens: int | None = None
    ) -> None:
        """`max_kv_tokens`: admit a request only while every running request's prompt + max_tokens
        fits in this many tokens of KV (default: as many as the prefix cache's memory budget holds);
        one request alone is always admitted."""
        self.engine = engine
        self.runner = engine.runner
        self.max_running = max_running
        self.prefill_chunk = prefill_chunk
        per_token = max(1, self.runner.bytes_per_token)
        self.max_kv_tokens = max_kv_tokens or max(engine.info.max_context, engine.radix.budget_bytes // per_token)
        self.stats = ServingStats()
        self._inbox: list[RequestHandle] = []
        self._cond = threading.Condition()
        self._waiting: list[RequestHandle] = []
        self._prefilling: _Prefill | None = None
        self._rows: list[_Sequence] = []
        self._cache = None  # the running batch's KV: [rows, kv_heads, slots, head_dim] per layer
        self._mask: torch.Tensor | None = None  # [rows, slots], 1 = real slot
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="aisql-serving", daemon=True)
        self._thread.start()

    # ---- other threads ---------------------------------------------------------------------
    def submit(self, request: ServeRequest, sink: Sink) -> RequestHandle:
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
                while not (self._inbox or self._waiting or self._prefilling or self._rows or self._stopped):
                    self._cond.wait()
                if self._stopped:
                    break
                self._waiting.extend(self._inbox)
                self._inbox.clear()
            try:
                with self.engine.lock, torch.inference_mode():
                    self._retire_cancelled()
                    self._prefill_some()
                    if self._rows:
                        self._decode_pass()
                    self.engine.sync_cache_stats()
            except Exception as err:  # noqa: BLE001 - every request in flight learns why, the loop goes on
                self._fail_all(f"{type(err).__name__}: {err}")
            self.stats.running, self.stats.waiting = len(self._rows), len(self._waiting) + (self._prefilling is not None)

    def _fail_all(self, message: str) -> None:
        handles = [s.handle for s in self._rows] + ([self._prefilling.handle] if self._prefilling else [])
        for handle in handles:
            handle.sink(FinishEvent("error", len(handle.request.prompt_ids), 0, 0, error=message))
        self._rows, self._cache, self._mask, self._prefilling = [], None, None, None

    # ---- prefill ---------------------------------------------------------------------------
    def _prefill_some(self) -> None:
        """Up to `prefill_chunk` prompt tokens this iteration: the next chunk of a long prompt in
        progress, then as many waiting requests as fit, prefilled together in one batched pass
        (rows with different cached prefixes); a request too long to fit starts a chunked prefill."""
        budget = self.prefill_chunk
        if self._prefilling is not None:
            budget -= self._prefill_chunk(self._prefilling, budget)
        batch: list[RequestHandle] = []
        reserved = sum(_kv_need(s.handle.request) for s in self._rows)
        while budget > 0 and self._waiting and self._prefilling is None and len(self._rows) + len(batch) < self.max_running:
            handle = self._waiting[0]
            if handle.cancelled:
                self._finish_unstarted(self._waiting.pop(0))
                continue
            need = _kv_need(handle.request)
            if reserved and reserved + need > self.max_kv_tokens:
                break  # waits (in order) until running requests finish and free their KV
            reserved += need
            tail = self._uncached_tail(handle.request.prompt_ids)
            if tail <= budget:
                batch.append(self._waiting.pop(0))
                budget -= tail
            elif batch:
                break  # it starts next iteration
            else:
                self._prefilling = self._start_prefill(self._waiting.pop(0))
                budget -= self._prefill_chunk(self._prefilling, budget)
        if batch:
            self._prefill_batch(batch)

    def _uncached_tail(self, prompt: Sequence[int]) -> int:
        if not self.engine.prefix_cache:
            return len(prompt)
        _, length = self.engine.radix.match(prompt)
        return len(prompt) - min(length, len(prompt) - 1)

    def _prefill_batch(self, handles: list[RequestHandle]) -> None:
        """Prefill several prompts in one pass, each from its deepest cached prefix (prefixes they
        share but the tree lacks are computed once first), store their KV, pick their first tokens."""
        engine, scheduler = self.engine, self.engine.scheduler
        prompts = [h.request.prompt_ids for h in handles]
        if engine.prefix_cache:
            chains = scheduler.admit(prompts)
            try:
                engine.compute_shared(chains)
                works = [scheduler.refresh(scheduler.leaf_work(i, p, chains[i], True)) for i, p in enumerate(prompts)]
                out = engine.run_rows(works, keep_cache=True, store=True)
            finally:
                scheduler.release(chains)
        else:  # nothing enters the tree (not even as structure)
            works = [Work(Row(engine.radix.root, 0, list(p)), [], i, p) for i, p in enumerate(prompts)]
            out = engine.run_rows(works, keep_cache=True, store=False)
        rows = torch.arange(len(works), device=self.runner.device)
        logits = self.runner.logits(out.hidden[rows, torch.tensor(out.lengths, device=self.runner.device) - 1])
        keep, sequences = [], []
        for b, (handle, work) in enumerate(zip(handles, works)):
            self.stats.prompt_tokens += len(handle.request.prompt_ids)
            self.stats.prefix_hit_tokens += work.row.prefix_len
            sequence = self._new_sequence(handle, work.row.prefix_len)
            if not self._first_token(sequence, logits[b]):
                keep.append(b)
                sequences.append(sequence)
        if not keep:
            return
        mask = out.mask
        if len(keep) < len(works):
            index = torch.tensor(keep, device=self.runner.device)
            out.cache.batch_select_indices(index)
            mask = mask[index]
        self._join(sequences, out.cache, mask)

    def _new_sequence(self, handle: RequestHandle, cached: int) -> _Sequence:
        request = handle.request
        greedy = request.temperature == 0 and request.allowed_token_ids is None
        return _Sequence(
            handle=handle,
            outputs=[],
            position=len(request.prompt_ids),
            feed=-1,
            cached=cached,
            drafts=self.engine.drafter(list(request.prompt_ids))
            if greedy and request.speculative and self.engine.speculation is not None
            else None,
            generator=_generator(request.seed, self.runner.device),
        )

    def _first_token(self, sequence: _Sequence, logits: torch.Tensor) -> bool:
        """Choose and send the token after the prompt; True if that already ends the request."""
        token, logprob, top = self._choose(sequence, logits)
        return self._emit(sequence, [token], [logprob] if logprob is not None else None, [top] if top is not None else None)

    def _start_prefill(self, handle: RequestHandle) -> _Prefill:
        """Seed the request's cache with the longest prefix the radix tree holds (all but the
        last prompt token at most: its hidden state gives the first output token)."""
        prompt = handle.request.prompt_ids
        cache = self.runner.new_cache()
        cached = 0
        if self.engine.prefix_cache:
            node, length = self.engine.radix.match(prompt)
            cached = min(length, len(prompt) - 1)
            if cached:
                for layer, (k, v) in enumerate(self.engine.radix.gather(node, cached)):
                    self.runner.seed_layer(cache, layer, k.unsqueeze(0), v.unsqueeze(0))  # gather made new tensors
                self.engine.radix.touch(node)
        self.engine.stats.kv_hit_tokens += cached
        self.stats.prefix_hit_tokens += cached
        self.stats.prompt_tokens += len(prompt)
        return _Prefill(handle, cache, cached, cached)

    def _prefill_chunk(self, state: _Prefill, budget: int) -> int:
        handle = state.handle
        if handle.cancelled:
            self._prefilling = None
            self._finish_unstarted(handle)
            return 0
        prompt = handle.request.prompt_ids
        end = min(len(prompt), state.done + budget)
        ids = torch.tensor([prompt[state.done : end]], device=self.runner.device)
        positions = torch.arange(state.done, end, device=self.runner.device).unsqueeze(0)
        hidden = self.runner.forward(ids, state.cache, position_ids=positions)
        self.runner.count(end - state.done, state.done)
        run = end - state.done
        state.done = end
        if end < len(prompt):
            return run
        # The whole prompt is in: keep its KV for later turns, pick the first token, join the batch.
        self._prefilling = None
        self._store(
            prompt,
            lambda start, stop: [
                (layer.keys[0, :, start:stop].clone(), layer.values[0, :, start:stop].clone()) for layer in state.cache.layers
            ],
        )
        logits = self.runner.logits(hidden[:, -1])  # [1, vocab]
        sequence = self._new_sequence(handle, state.cached)
        if not self._first_token(sequence, logits[0]):
            self._join([sequence], state.cache, torch.ones((1, len(prompt)), dtype=torch.long, device=self.runner.device))
        return run

    def _finish_unstarted(self, handle: RequestHandle) -> None:
        self.stats.cancelled += 1
        handle.sink(FinishEvent("cancelled", len(handle.request.prompt_ids), 0, 0))

    # ---- the running batch -----------------------------------------------------------------
    def _join(self, sequences: list[_Sequence], cache, mask: torch.Tensor) -> None:
        """Append prefilled requests as new rows of the running batch (`mask`: their real slots)."""
        if self._cache is None:
            self._cache, self._mask, self._rows = cache, mask, list(sequences)
            return
        slots = max(self._mask.shape[1], mask.shape[1])
        merged = self.runner.new_cache()
        for index, (old, new) in enumerate(zip(self._cache.layers, cache.layers)):
            keys = torch.cat([_pad_slots(old.keys, slots), _pad_slots(new.keys, slots)], dim=0)
            values = torch.cat([_pad_slots(old.values, slots), _pad_slots(new.values, slots)], dim=0)
            self.runner.seed_layer(merged, index, keys, values)
        self._mask = torch.cat([_pad_slots(self._mask, slots), _pad_slots(mask, slots)], dim=0)
        self._cache = merged
        self._rows.extend(sequences)

    def _keep_rows(self, keep: list[int]) -> None:
        if not keep:
            self._rows, self._cache, self._mask = [], None, None
            return
        if len(keep) == len(self._rows):
            return
        index = torch.tensor(keep, device=self.runner.device)
        self._cache.batch_select_indices(index)
        self._mask = self._mask[index]
        self._rows = [self._rows[i] for i in keep]
        live = self._mask.any(dim=0)
        if int(live.sum()) < self._mask.shape[1] // 2:  # mostly dead slots (a long row left): compact
            columns = live.nonzero().squeeze(1)
            for layer in self._cache.layers:
                layer.keys, layer.values = layer.keys[:, :, columns], layer.values[:, :, columns]
            self._mask = self._mask[:, columns]

    def _retire_cancelled(self) -> None:
        keep = []
        for row, sequence in enumerate(self._rows):
            if sequence.handle.cancelled:
                self.stats.cancelled += 1
                sequence.handle.sink(self._finish_event(sequence, "cancelled"))
            else:
                keep.append(row)
        self._keep_rows(keep)

    def _decode_pass(self) -> None:
        rows = self._rows
        device = self.runner.device
        drafts = []
        for sequence in rows:
            room = sequence.handle.request.max_tokens - len(sequence.outputs) - 1
            drafts.append(sequence.drafts.propose(room) if sequence.drafts is not None else [])
        width = 1 + max(len(d) for d in drafts)
        ids = torch.full((len(rows), width), self.runner.pad_id, dtype=torch.long, device=device)
        new_mask = torch.zeros((len(rows), width), dtype=torch.long, device=device)
        positions = torch.zeros((len(rows), width), dtype=torch.long, device=device)
        for row, (sequence, draft) in enumerate(zip(rows, drafts)):
            fed = [sequence.feed] + draft
            ids[row, : len(fed)] = torch.tensor(fed, device=device)
            new_mask[row, : len(fed)] = 1
            positions[row] = torch.arange(sequence.position, sequence.position + width, device=device)
        self._mask = torch.cat([self._mask, new_mask], dim=1)
        hidden = self.runner.forward(ids, self._cache, attention_mask=self._mask, position_ids=positions)
        logits = self.runner.logits(hidden)  # [rows, width, vocab]
        self.stats.decode_passes += 1
        self.engine.stats.decode_passes += 1
        keep = []
        slots = self._mask.shape[1]
        for row, (sequence, draft) in enumerate(zip(rows, drafts)):
            request = sequence.handle.request
            if request.temperature == 0 and request.allowed_token_ids is None:
                greedy = torch.argmax(logits[row, : len(draft) + 1], dim=-1).tolist()
                accepted = accepted_length(draft, greedy)
                tokens = draft[:accepted] + [greedy[accepted]]
            else:
                accepted = 0
                tokens = [self._choose(sequence, logits[row, 0])[0]]
            self._mask[row, slots - width + 1 + accepted :] = 0  # slots of rejected drafts
            self.runner.count(1 + accepted, sequence.position)
            sequence.position += 1 + accepted
            if sequence.drafts is not None:
                sequence.drafts.feedback(len(draft), accepted)
            self.stats.draft_tokens += len(draft)
            self.stats.draft_accepted_tokens += accepted
            self.engine.stats.draft_tokens += len(draft)
            self.engine.stats.draft_accepted_tokens += accepted
            logprobs = tops = None
            if request.logprobs is not None:
                scored = [_logprobs(logits[row, j], token, request.logprobs) for j, token in enumerate(tokens)]
                logprobs, tops = [s[0] for s in scored], [s[1] for s in scored]
            if self._emit(sequence, tokens, logprobs, tops):
                self._store_finished(sequence, self._cache, self._mask, row)
            else:
                keep.append(row)
        self._keep_rows(keep)

    # ---- tokens out ------------------------------------------------------------------------
    def _choose(self, sequence: _Sequence, logits: torch.Tensor) -> tuple[int, float | None, dict | None]:
        request = sequence.handle.request
        candidates = logits
        if request.allowed_token_ids is not None:
            candidates = torch.full_like(logits, float("-inf"))
            allowed = torch.tensor(request.allowed_token_ids, device=logits.device)
            candidates[allowed] = logits[allowed]
        if request.temperature == 0:
            token = int(torch.argmax(candidates))
        else:
            probs = torch.softmax(candidates.float() / request.temperature, dim=-1)
            if request.top_p < 1.0:
                sorted_probs, order = torch.sort(probs, descending=True)
                outside = torch.cumsum(sorted_probs, dim=-1) - sorted_probs > request.top_p
                sorted_probs[outside] = 0
                probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
            token = int(torch.multinomial(probs, 1, generator=sequence.generator))  # same device as probs
        if request.logprobs is None:
            return token, None, None
        logprob, top = _logprobs(logits, token, request.logprobs)
        return token, logprob, top

    def _emit(self, sequence: _Sequence, tokens: list[int], logprobs, tops) -> bool:
        """Send the tokens up to a stop token or max_tokens; True if the request is finished."""
        handle = sequence.handle
        request = handle.request
        out: list[int] = []
        finish = None
        for token in tokens:
            if token in self.engine.stop_ids:
                finish = "stop"
                break
            out.append(token)
            if len(sequence.outputs) + len(out) >= request.max_tokens:
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
            self.stats.generated_tokens += len(out)
            self.engine.stats.generated_tokens += len(out)
            handle.sink(TokenEvent(out, logprobs[: len(out)] if logprobs else None, tops[: len(out)] if tops else None))
        elif handle.times.first_token is None:
            handle.times.first_token = now
        sequence.feed = out[-1] if out else -1
        if finish is None:
            return False
        self.stats.finished += 1
        handle.sink(self._finish_event(sequence, finish))
        return True

    def _finish_event(self, sequence: _Sequence, reason: str) -> FinishEvent:
        return FinishEvent(reason, len(sequence.handle.request.prompt_ids), sequence.cached, len(sequence.outputs))

    # ---- the radix tree --------------------------------------------------------------------
    def _store_finished(self, sequence: _Sequence, cache, mask: torch.Tensor, row: int) -> None:
        """Keep the finished sequence's KV (prompt + output but its last token, which was never
        run) in the tree: the next turn of the conversation starts with exactly these tokens."""
        tokens = list(sequence.handle.request.prompt_ids) + sequence.outputs[:-1]
        slots = mask[row].nonzero().squeeze(1)[: len(tokens)]

        def kv(start: int, stop: int) -> list[LayerKV]:
            picked = slots[start:stop]
            return [(layer.keys[row, :, picked].clone(), layer.values[row, :, picked].clone()) for layer in cache.layers]

        self._store(tokens, kv)

    def _store(self, tokens: Sequence[int], kv_of: Callable[[int, int], list[LayerKV]]) -> None:
        if not self.engine.prefix_cache or not tokens:
            return
        radix = self.engine.radix
        chain = radix.insert_path(tokens)
        radix.pin(chain)  # storing a child must not evict the parent just stored
        try:
            for node in chain:
                node.uses += 1
                if node.kv is None and not radix.store(node, kv_of(node.start, node.end)):
                    break
        finally:
            radix.unpin(chain)
        radix.touch(chain[-1])


def _kv_need(request: ServeRequest) -> int:
    """Tokens of KV a request holds at most: its prompt and every token it may generate."""
    return len(request.prompt_ids) + request.max_tokens


def _pad_slots(tensor: torch.Tensor, slots: int) -> torch.Tensor:
    """Right-pad the slot dimension (dim 2 of KV [rows, heads, slots, dim], dim 1 of a mask) with zeros."""
    dim = 2 if tensor.dim() == 4 else 1
    missing = slots - tensor.shape[dim]
    if missing <= 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([tensor, tensor.new_zeros(shape)], dim=dim)


def _logprobs(logits: torch.Tensor, token: int, top: int) -> tuple[float, dict[int, float]]:
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    chosen = float(logprobs[token])
    if top <= 0:
        return chosen, {}
    values, ids = torch.topk(logprobs, min(top, logprobs.shape[-1]))
    return chosen, dict(zip(ids.tolist(), values.tolist()))


def _generator(seed: int | None, device: torch.device) -> torch.Generator | None:
    if seed is None:
        return None
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator
