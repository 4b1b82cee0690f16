"""HFEngine: a transformers causal LM run in-process with torch, on CPU or CUDA.

Requests go through the radix KV cache: shared prompt prefixes are computed once (and kept for
later calls), each request runs only its own tail against them, in batches. Scoring needs one
forward pass per batch of yes/no questions and multiplies only the label rows of the output head;
labels longer than one token continue from the batch's cache. Generation decodes greedily on the
same cache, with prompt-lookup speculation (lossless) on by default.

`reuse=False` runs every request from scratch, one prompt's tokens at a time, no tree reads or
writes: the naive reference (its repeated tokens still show up as KV regret).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Sequence

import torch

from aisql.engine.base import EngineStats, GenerateRequest, Generation, LabelScores, ModelFacts, ModelInfo, ScoreRequest
from aisql.engine.batch.model_runner import BatchOutput, ModelRunner, Row
from aisql.engine.model.prompt_format import EncodesPrompts, PromptFormat
from aisql.engine.kv.eviction import eviction_policy
from aisql.engine.kv.radix import RadixCache
from aisql.engine.batch.scheduler import Scheduler, Work
from aisql.engine.batch import flat as flat_attention
from aisql.engine.decoding.json_constraint import DEAD_END, check_budget, row_constraint
from aisql.engine.decoding.decode import DecodeRow, decode_pass, greedy_accept, settle
from aisql.engine.decoding.token_sampling import sample_token, seeded_generator
from aisql.engine.batch.flat import FlatOutput, Segment
from aisql.engine.decoding.speculative import NgramIndex, SpeculationConfig


class HFEngine(EncodesPrompts):
    pool = None  # one engine, not a worker pool (Engine.pool)
    reads_states = True  # ScoreRequest.keep_state: the final hidden state comes back with the scores

    def __init__(
        self,
        model,
        tokenizer,
        info: ModelInfo,
        *,
        max_batch_tokens: int = 16384,
        max_batch_size: int = 64,
        kv_budget_bytes: int = 1 << 30,
        prefix_cache: bool = True,
        speculation: SpeculationConfig | None = SpeculationConfig(),
        flat: bool = True,
        eviction: str = "reuse",
        threads=None,  # aisql.engine.threads.ThreadGovernor on a CPU: the thread count follows the load beside it
    ) -> None:
        self.model = model.eval()
        self.threads = threads
        self.tokenizer = tokenizer
        self.info = info
        self.stats = EngineStats()
        self.format = PromptFormat(tokenizer)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.runner = ModelRunner(model, self.stats, pad_id)
        # Scoring and prefix filling run flattened (no padding, prefixes read once per pass)
        # where the architecture's attention is plain; batched decoding keeps the padded cache.
        self.flat = flat and flat_attention.supported(model)
        if self.flat:
            flat_attention.register()
            model.config._attn_implementation = flat_attention.ATTENTION
        self.device = self.runner.device
        self.prefix_cache = prefix_cache and self.runner.supports_prefix_cache
        bytes_per_token = max(1, self.runner.bytes_per_token)
        self.radix = RadixCache(
            kv_budget_bytes if self.prefix_cache else 0,
            bytes_per_token,
            self.runner.recompute_cost,
            policy=eviction_policy(eviction, self.runner.recompute_cost, bytes_per_token),
        )
        self.scheduler = Scheduler(self.radix, max_batch_tokens, 4 * max_batch_tokens, max_batch_size)
        self.speculation = speculation
        # Where drafts come from: prompt lookup by default (tests inject an oracle here).
        self.drafter = lambda tokens: NgramIndex(self.speculation, tokens)
        self.stop_ids = _stop_ids(model, tokenizer)
        self.lock = threading.RLock()  # one batch call or serving iteration at a time
        # bfloat16 on a CPU: near ties answered again in float32, so planned == naive (aisql.engine.model.tie_confirmation)
        self.tie_confirmation = None
        self._claims: dict = {}

    @property
    def kv_budget_bytes(self) -> int:
        return self.radix.budget_bytes

    def facts(self) -> ModelFacts:
        return ModelFacts(format=self.format, profile=self.runner.profile, encode_label=self.encode_label)

    def reset_cache(self) -> None:
        """Forget every cached prefix and its history (KV, structure, regret bookkeeping)."""
        with self.lock:
            self.radix = self.radix.empty_like()  # counters are cumulative over the engine's life
            self.scheduler.radix = self.radix
            if self.tie_confirmation is not None:
                self.tie_confirmation.reset_cache()

    # ---- scoring ---------------------------------------------------------------------------
    def score(self, requests: Sequence[ScoreRequest], *, reuse: bool = True) -> list[LabelScores]:
        results: list[LabelScores | None] = [None] * len(requests)
        with self._admitted(requests, reuse) as (windows, reuse):
            for window in windows:
                self._compute_shared_for(window, reuse)
                for batch in self.scheduler.batches(window):
                    self._follow_load()
                    batch = [self.scheduler.refresh(w) for w in batch]
                    scores = self._score_batch(batch, [requests[w.index] for w in batch], reuse)
                    for work, value in zip(batch, scores):
                        results[work.index] = value
                    self._release(batch)
            if self.tie_confirmation is not None:
                self._confirm_ties(requests, results, reuse)
        self.stats.score_requests += len(requests)
        return results  # type: ignore[return-value]

    def _confirm_ties(self, requests: Sequence[ScoreRequest], results: list, reuse: bool) -> None:
        reference = self.tie_confirmation
        before = reference.reference_stats()
        confirmed = reference.confirm(requests, results, reuse)
        if confirmed:
            self.stats.tie_confirmed_prompts += confirmed
            self.stats.tie_confirmed_tokens += reference.reference_stats() - before

    @contextmanager
    def _admitted(self, requests: Sequence, reuse: bool):
        """Admit the call's prompts into the tree; yield their works in windows (prefix order
        between windows, shortest tails first inside one)."""
        with self.lock, torch.inference_mode():
            reuse = reuse and self.prefix_cache
            chains = self.scheduler.admit([r.prompt_ids for r in requests])
            self._claims = dict(enumerate(chains))  # requests whose batch has not finished yet
            try:
                works = [self.scheduler.leaf_work(i, r.prompt_ids, chains[i], reuse) for i, r in enumerate(requests)]
                yield (self.scheduler.windows(works) if reuse else [works]), reuse
            finally:
                self.scheduler.release(list(self._claims.values()))  # after an error too
                self._claims = {}
                self.sync_cache_stats()

    def _release(self, batch: list[Work]) -> None:
        """The batch's requests are done: their prefixes no longer count as needed by this call."""
        self.scheduler.release([self._claims.pop(w.index) for w in batch if w.index in self._claims])

    def _compute_shared_for(self, window: list[Work], reuse: bool) -> None:
        """Before a window runs: compute the shared prefixes its requests need that are not
        cached. They are computed when the first window needing them comes, not all up front:
        requests arrive in prefix order, so with a budget smaller than the whole tree a group's
        prefix is still in the cache when its rows run."""
        if reuse:
            self.compute_shared([w.chain for w in window])

    def _score_batch(self, batch: list[Work], requests: list[ScoreRequest], reuse: bool) -> list[LabelScores]:
        if self.flat:
            return self._score_flat(batch, requests, reuse)
        needs_tail = any(len(label) > 1 for r in requests for label in r.label_ids)
        out = self.run_rows(batch, keep_cache=needs_tail or reuse, store=reuse)
        rows = torch.arange(len(batch), device=self.device)
        last = out.hidden[rows, torch.tensor(out.lengths, device=self.device) - 1]

        # First label token: only those rows of the output head. The softmax normaliser at this
        # position is the same for every label of a request, so it cancels.
        width = max(len(r.label_ids) for r in requests)
        first = torch.zeros((len(batch), width), dtype=torch.long, device=self.device)
        for b, r in enumerate(requests):
            first[b, : len(r.label_ids)] = torch.tensor([label[0] for label in r.label_ids], device=self.device)
        first_logits = self.runner.label_logits(last, first)
        tails = self._score_tails(requests, out) if needs_tail else {}
        return _label_scores(requests, first_logits, tails, last)

    def _score_flat(self, batch: list[Work], requests: list[ScoreRequest], reuse: bool) -> list[LabelScores]:
        """One flattened pass: every request's tokens, and the tails of its multi-token labels as
        segments continuing it (so full-likelihood labels cost no second pass)."""
        segments = [Segment(w.row.prefix, w.row.prefix_len, w.row.tokens, w.row.prefix_len) for w in batch]
        tails: list[tuple[int, int, int]] = []  # (request, label, segment)
        for b, (work, request) in enumerate(zip(batch, requests)):
            for k, label in enumerate(request.label_ids):
                if len(label) > 1:
                    tails.append((b, k, len(segments)))
                    segments.append(Segment(work.row.prefix, work.row.prefix_len, label[:-1], work.row.prefix_len + len(work.row.tokens), parent=b))
        out = self.run_segments(batch, segments, store=reuse)
        lasts = torch.tensor([out.last(b, len(w.row.tokens)) for b, w in enumerate(batch)], device=self.device)
        width = max(len(r.label_ids) for r in requests)
        first = torch.zeros((len(batch), width), dtype=torch.long, device=self.device)
        for b, r in enumerate(requests):
            first[b, : len(r.label_ids)] = torch.tensor([label[0] for label in r.label_ids], device=self.device)
        last = out.hidden[lasts]
        first_logits = self.runner.label_logits(last, first)
        tail_scores: dict[tuple[int, int], float] = {}
        if tails:
            positions = [out.offsets[s] + j for _, _, s in tails for j in range(len(segments[s].tokens))]
            logprobs = torch.log_softmax(self.runner.logits(out.hidden[torch.tensor(positions, device=self.device)]), dim=-1)
            row = 0
            for b, k, s in tails:
                targets = requests[b].label_ids[k][1:]
                steps = torch.arange(row, row + len(targets), device=self.device)
                tail_scores[(b, k)] = float(logprobs[steps, torch.tensor(targets, device=self.device)].double().sum())
                row += len(targets)
        return _label_scores(requests, first_logits, tail_scores, last)

    def _score_tails(self, requests: list[ScoreRequest], out: BatchOutput) -> dict[tuple[int, int], float]:
        """log P(label[1:] | prompt, label[0]) for labels longer than one token, from the batch cache."""
        rows = [(b, k, label) for b, r in enumerate(requests) for k, label in enumerate(r.label_ids) if len(label) > 1]
        slots = out.mask.shape[1]
        tails: dict[tuple[int, int], float] = {}
        for chunk in _chunks(rows, max(1, self.scheduler.max_cache_tokens // (slots + 8))):
            sources = torch.tensor([b for b, _, _ in chunk], device=self.device)
            cache = self.runner.select_cache(out.cache, sources)
            width = max(len(label) - 1 for _, _, label in chunk)
            ids = torch.full((len(chunk), width), self.runner.pad_id, dtype=torch.long, device=self.device)
            mask = torch.cat([out.mask[sources], torch.zeros((len(chunk), width), dtype=torch.long, device=self.device)], 1)
            positions = torch.zeros((len(chunk), width), dtype=torch.long, device=self.device)
            for r, (b, _, label) in enumerate(chunk):
                ids[r, : len(label) - 1] = torch.tensor(label[:-1], device=self.device)
                mask[r, slots : slots + len(label) - 1] = 1
                start = out.prefix_lengths[b] + out.lengths[b]
                positions[r] = torch.arange(start, start + width, device=self.device)
            hidden = self.runner.forward(ids, cache, attention_mask=mask, position_ids=positions)
            real = sum(len(label) - 1 for _, _, label in chunk)
            for b, _, label in chunk:
                self.runner.count(len(label) - 1, out.prefix_lengths[b] + out.lengths[b])
            self.stats.padding_tokens += len(chunk) * width - real
            logprobs = torch.log_softmax(self.runner.logits(hidden), dim=-1)
            for r, (b, k, label) in enumerate(chunk):
                targets = torch.tensor(label[1:], device=self.device)
                steps = torch.arange(len(label) - 1, device=self.device)
                tails[(b, k)] = float(logprobs[r, steps, targets].double().sum())
        return tails

    def _follow_load(self) -> None:
        """Between batches: the thread count follows the load beside the engine (CPU only)."""
        if self.threads is not None:
            self.threads.adjust()

    # ---- generation ------------------------------------------------------------------------
    def generate(self, requests: Sequence[GenerateRequest], *, reuse: bool = True, speculative: bool = True) -> list[Generation]:
        if self.tie_confirmation is not None:
            return self._generate_in_float32(requests, reuse, speculative)
        results: list[Generation | None] = [None] * len(requests)
        with self._admitted(requests, reuse) as (windows, reuse):
            for window in windows:
                self._compute_shared_for(window, reuse)
                room = [requests[w.index].max_tokens for w in window]
                for batch in self.scheduler.batches(window, room):
                    self._follow_load()
                    batch = [self.scheduler.refresh(w) for w in batch]
                    generations = self._generate_batch(batch, [requests[w.index] for w in batch], reuse, speculative)
                    for work, generation in zip(batch, generations):
                        results[work.index] = generation
                    self._release(batch)
        self.stats.generate_requests += len(requests)
        return results  # type: ignore[return-value]

    def _generate_in_float32(self, requests: Sequence[GenerateRequest], reuse: bool, speculative: bool) -> list[Generation]:
        """Generation on a reduced-precision CPU engine runs on its float32 reference: a greedy
        token that bfloat16 nearly ties cannot be confirmed after the tokens that follow it, and
        float32's batched and one-row decoding give the same text (planned == naive). The work is
        counted here, as this engine's."""
        reference = self.tie_confirmation.reference()
        before = reference.stats.copy()
        out = reference.generate(requests, reuse=reuse, speculative=speculative)
        self.stats.add(reference.stats.since(before))
        return out

    def _generate_batch(
        self, batch: list[Work], requests: list[GenerateRequest], reuse: bool, speculative: bool
    ) -> list[Generation]:
        out = self.run_rows(batch, keep_cache=True, store=reuse)
        cache, mask = out.cache, out.mask
        rows = torch.arange(len(batch), device=self.device)
        last = out.hidden[rows, torch.tensor(out.lengths, device=self.device) - 1]
        first_logits = self.runner.logits(last)
        next_tokens = torch.argmax(first_logits, dim=-1).tolist()
        # Constrained rows (typed literals, JSON schemas): the most likely token that keeps the
        # output valid, and a closing that fits the budget (aisql.engine.decoding.json_constraint).
        constraints = [row_constraint(r.grammar, self.tokenizer, tuple(self.stop_ids)) if r.grammar else None for r in requests]
        for constraint, request in zip(constraints, requests):
            check_budget(constraint, request.max_tokens)
        # Sampled rows (temperature > 0): each from its own seeded generator, never with drafts.
        generators = [seeded_generator(r.seed if r.seed is not None else 0, self.device) if r.temperature > 0 else None for r in requests]
        for b, request in enumerate(requests):
            if generators[b] is not None:
                next_tokens[b] = sample_token(first_logits[b], request.temperature, request.top_p, generators[b])
        first_pending: dict[int, list[int]] = {}
        for b, constraint in enumerate(constraints):
            if constraint is not None:
                first_pending[b] = constraint.next(first_logits[b], requests[b].max_tokens)

        drafting = speculative and self.speculation is not None
        outputs: list[list[int]] = [[] for _ in batch]
        steps = [0] * len(batch)
        finish: list[str | None] = [None] * len(batch)
        indexes = [self.drafter(list(r.prompt_ids)) for r in requests] if drafting else None
        decode_rows = [DecodeRow(-1, out.prefix_lengths[b] + out.lengths[b]) for b in range(len(batch))]
        active = list(range(len(batch)))
        pending = {b: first_pending.get(b, [next_tokens[b]]) for b in active}  # chosen tokens not yet emitted

        while True:
            # Emit the model's tokens, stopping rows at an end token or at max_tokens.
            still = []
            for b in active:
                for token in pending[b]:
                    steps[b] += 1
                    if token in self.stop_ids or token == DEAD_END:
                        finish[b] = "stop"
                        break
                    outputs[b].append(token)
                    if len(outputs[b]) >= requests[b].max_tokens:
                        finish[b] = "length"
                        break
                if finish[b] is None:
                    still.append(b)
                    decode_rows[b].feed = outputs[b][-1]
                    if indexes:
                        indexes[b].extend(pending[b])
            if not still:
                break
            if len(still) != len(active):
                keep = torch.tensor([active.index(b) for b in still], device=self.device)
                cache.batch_select_indices(keep)
                mask = mask[keep]
            active = still
            for b in active:
                limit = requests[b].max_tokens - len(outputs[b]) - 1
                decode_rows[b].draft = indexes[b].propose(limit) if indexes and generators[b] is None else []
            step_rows = [decode_rows[b] for b in active]
            step = decode_pass(self.runner, cache, mask, step_rows)
            accepted = []
            for row, b in enumerate(active):
                if generators[b] is not None:
                    request = requests[b]
                    accepted.append(0)
                    pending[b] = [sample_token(step.logits[row, 0], request.temperature, request.top_p, generators[b])]
                    continue
                if constraints[b] is not None:  # drafts verified under the constraint: lossless
                    remaining = requests[b].max_tokens - len(outputs[b])
                    pending[b], kept = constraints[b].verify(decode_rows[b].draft, step.logits[row], remaining)
                else:
                    pending[b], kept = greedy_accept(decode_rows[b].draft, step.logits[row])
                accepted.append(kept)
                if indexes:
                    indexes[b].feedback(len(decode_rows[b].draft), kept)
            settle(self.runner, self.stats, step, step_rows, accepted)
            mask = step.mask
        self.stats.generated_tokens += sum(steps)
        return [
            Generation(
                token_ids=tuple(outputs[b]),
                text=self.tokenizer.decode(outputs[b], skip_special_tokens=True).strip(),
                finish_reason=finish[b] or "length",
                steps=steps[b],
            )
            for b in range(len(batch))
        ]

    # ---- serving: the calls the serving loop makes ----------------------------------------
    def cached_prefix_length(self, prompt: Sequence[int], salt: str | None = None) -> int:
        """Prompt tokens the prefix cache would serve now (all but the last at most: its hidden
        state gives the first output token). `salt`: the cache partition (see RadixCache)."""
        if not self.prefix_cache:
            return 0
        return min(self.radix.match_prefix(prompt, salt).length, len(prompt) - 1)

    def prefill(self, prompts: Sequence[Sequence[int]], salts: Sequence[str | None] | None = None) -> tuple[BatchOutput, list[int]]:
        """Prefill several prompts in one pass, each from its deepest cached prefix (prefixes they
        share but the tree lacks are computed once first), storing their KV in the tree. Returns
        the pass (its cache kept, one row per prompt) and each prompt's cached length."""
        self._follow_load()
        if not self.prefix_cache:  # nothing enters the tree, not even as structure
            works = [Work(Row(self.radix.root, 0, list(p)), [], i, p) for i, p in enumerate(prompts)]
            return self.run_rows(works, keep_cache=True, store=False), [0] * len(works)
        chains = self.scheduler.admit(prompts, salts)
        try:
            self.compute_shared(chains)
            works = [self.scheduler.refresh(self.scheduler.leaf_work(i, p, chains[i], True)) for i, p in enumerate(prompts)]
            out = self.run_rows(works, keep_cache=True, store=True)
        finally:
            self.scheduler.release(chains)
        return out, [w.row.prefix_len for w in works]

    def start_sequence(self, prompt: Sequence[int], salt: str | None = None):
        """A new KV cache for one sequence, seeded with the longest prefix the tree holds (all but
        the last prompt token at most). Returns (cache, cached tokens)."""
        cache = self.runner.new_cache()
        cached = 0
        if self.prefix_cache:
            match = self.radix.match_prefix(prompt, salt)
            cached = min(match.length, len(prompt) - 1)
            if cached:
                for layer, (k, v) in enumerate(self.radix.gather(match.node, cached)):
                    self.runner.seed_layer(cache, layer, k.unsqueeze(0), v.unsqueeze(0))  # gather made new tensors
                self.radix.touch(match.node)
        self.stats.kv_hit_tokens += cached
        return cache, cached

    def store_sequence(self, tokens: Sequence[int], kv_of, salt: str | None = None) -> None:
        """Keep a sequence's KV in the tree for the next turn; `kv_of(start, end)` gives the KV of
        positions [start, end)."""
        if not self.prefix_cache or not tokens:
            return
        chain = self.radix.insert(tokens, salt)
        self.radix.record_use(chain)
        self.radix.insert_kv(chain, kv_of)
        self.radix.touch(chain[-1])

    # ---- shared mechanics ------------------------------------------------------------------
    def compute_shared(self, chains) -> None:
        """Compute and store the uncached prefixes shared by two or more of the call's requests
        along `chains`, top-down."""
        for level in self.scheduler.shared_levels(chains):
            level.sort(key=lambda w: len(w.row.tokens))  # independent rows: similar lengths pad less
            for batch in self.scheduler.batches(level):
                batch = [w for w in map(self.scheduler.refresh, batch) if w is not None]
                if batch and self.flat:
                    segments = [Segment(w.row.prefix, w.row.prefix_len, w.row.tokens, w.row.prefix_len) for w in batch]
                    self.run_segments(batch, segments, store=True, requests=False)
                elif batch:
                    self.run_rows(batch, keep_cache=True, store=True, requests=False)

    def run_rows(self, batch: list[Work], keep_cache: bool, store: bool, requests: bool = True) -> BatchOutput:
        """One forward pass over the batch's rows, storing the KV of the nodes they computed.

        The caller refreshes `batch` first (`Scheduler.refresh`), so every prefix it reads is
        cached now; pins keep it so until the pass is done. `requests`: the rows are requests'
        own rows, so their cached prefixes count as hits (rows filling the cache do not)."""
        for work in batch:
            self.radix.lock(work.row.prefix)
        try:
            out = self.runner.run([w.row for w in batch], self.radix, keep_cache)
            for b, work in enumerate(batch):
                self._after_row(work, requests)
                if store:
                    offset = work.row.prefix_len
                    self.radix.insert_kv(work.nodes, lambda start, end: self.runner.new_kv(out, b, start - offset, end - offset))
            return out
        finally:
            for work in batch:
                self.radix.unlock(work.row.prefix)

    def run_segments(self, batch: list[Work], segments: list[Segment], store: bool, requests: bool = True) -> FlatOutput:
        """`run_rows` flattened: the first len(batch) segments are the works' rows; the rest
        (label tails) continue them. Same bookkeeping: prefix locks, hits, computed nodes, KV."""
        for work in batch:
            self.radix.lock(work.row.prefix)
        try:
            out = flat_attention.run_flat(self.model, self.runner.decoder, self.runner.cache_kwarg, self.radix, segments, self.runner.pad_id)
            self.stats.forward_passes += 1
            for segment in segments:
                self.runner.count(len(segment.tokens), segment.start)
            for b, work in enumerate(batch):
                self._after_row(work, requests)
                if store:
                    offset = work.row.prefix_len
                    self.radix.insert_kv(work.nodes, lambda start, end: out.kv(b, start - offset, end - offset))
            return out
        finally:
            for work in batch:
                self.radix.unlock(work.row.prefix)

    def _after_row(self, work: Work, requests: bool) -> None:
        """A row ran: its cached prefix counts as hits (for requests' rows), its nodes as computed."""
        if requests:
            self.stats.kv_hit_tokens += work.row.prefix_len
        if work.row.prefix_len < work.row.prefix.end:  # re-ran the end of a cached node
            self.radix.record_computed(work.row.prefix, work.row.prefix.end - work.row.prefix_len)
        for node in work.nodes:
            self.radix.record_computed(node)

    def sync_cache_stats(self) -> None:
        stats = self.radix.stats
        self.stats.kv_regret_tokens = stats.regret_tokens
        self.stats.kv_evicted_bytes = stats.evicted_bytes
        self.stats.peak_kv_bytes = max(self.stats.peak_kv_bytes, stats.peak_bytes)
        self.stats.kv_cached_bytes = self.radix.used_bytes


def _chunks(items: list, size: int):
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _stop_ids(model, tokenizer) -> frozenset[int]:
    ids: set[int] = set()
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in eos if isinstance(eos, (list, tuple)) else [eos]:
        if value is not None:
            ids.add(int(value))
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return frozenset(ids)


def _label_scores(
    requests: Sequence[ScoreRequest], first_logits: torch.Tensor, tails: dict[tuple[int, int], float], last: torch.Tensor
) -> list[LabelScores]:
    """Each request's label log-likelihoods normalised over its labels: the first token's logit
    plus the log-probability of the label's later tokens (`tails[(request, label)]`, 0 for a
    one-token label), log-softmaxed in float64 — one rule for the padded and flattened passes.
    `last`: the final hidden states the first logits were read from, returned (float32) to the
    requests that keep them."""
    states = last.float().cpu().numpy() if any(r.keep_state for r in requests) else None
    scores = []
    for b, r in enumerate(requests):
        values = first_logits[b, : len(r.label_ids)].double().clone()
        for k in range(len(r.label_ids)):
            values[k] += tails.get((b, k), 0.0)
        state = states[b].copy() if r.keep_state else None
        scores.append(LabelScores(tuple(torch.log_softmax(values, dim=0).tolist()), state))
    return scores
