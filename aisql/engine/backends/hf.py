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
from aisql.engine.batch.model_runner import BatchOutput, ModelRunner
from aisql.engine.model.prompt_format import EncodesPrompts, PromptFormat
from aisql.engine.kv.eviction import eviction_policy
from aisql.engine.kv.radix import RadixCache, RadixNode
from aisql.engine.batch.scheduler import Scheduler, Work
from aisql.engine.batch import flat as flat_attention
from aisql.engine.backends.hf_decoding import BatchDecode
from aisql.engine.backends.hf_scoring import score_batch
from aisql.engine.backends.hf_shared import shared_levels_in_one_pass
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
                    self.follow_load()
                    batch = [self.scheduler.refresh(w) for w in batch]
                    scores = score_batch(self, batch, [requests[w.index] for w in batch], reuse)
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

    def follow_load(self) -> None:
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
                    self.follow_load()
                    batch = [self.scheduler.refresh(w) for w in batch]
                    generations = BatchDecode(self, batch, [requests[w.index] for w in batch], reuse, speculative).run()
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

    # ---- serving: the calls the serving loop makes ----------------------------------------
    def cached_prefix_length(self, prompt: Sequence[int], salt: str | None = None) -> int:
        """Prompt tokens the prefix cache would serve now (all but the last at most: its hidden
        state gives the first output token). `salt`: the cache partition (see RadixCache)."""
        if not self.prefix_cache:
            return 0
        return min(self.radix.match_prefix(prompt, salt).length, len(prompt) - 1)

    @property
    def mixed_passes(self) -> bool:
        """Whether the serving loop may run decode rows and prompt chunks in one pass: the
        model's attention is plain (the "aisql" attention is registered for it)."""
        return self.flat

    def share_prefixes(self, prompts: Sequence[Sequence[int]], salts: Sequence[str | None] | None = None) -> None:
        """Compute, once, the uncached prefixes two or more of these prompts share, into the tree
        (prompts starting together then each read them instead of computing them again)."""
        if not self.prefix_cache or len(prompts) < 2:
            return
        self.follow_load()
        chains = self.scheduler.admit(prompts, salts)
        try:
            self.compute_shared(chains)
        finally:
            self.scheduler.release(chains)

    def cached_prefix_pieces(self, prompt: Sequence[int], salt: str | None = None) -> list[tuple[RadixNode, int]]:
        """The longest cached prefix of `prompt` (all but its last token at most) as the tree's
        node pieces, to be copied once where the sequence's KV lives; counted as hits."""
        if not self.prefix_cache:
            return []
        match = self.radix.match_prefix(prompt, salt)
        cached = min(match.length, len(prompt) - 1)
        if not cached:
            return []
        self.radix.touch(match.node)
        self.stats.kv_hit_tokens += cached
        return self.radix.kv_segments(match.node, cached)

    def start_sequence(self, prompt: Sequence[int], salt: str | None = None):
        """A new KV cache for one sequence, seeded with the longest prefix the tree holds (all but
        the last prompt token at most; `cached_prefix_pieces`'s). Returns (cache, cached tokens)."""
        cache = self.runner.new_cache()
        pieces = self.cached_prefix_pieces(prompt, salt)
        for layer in range(len(pieces[0][0].kv) if pieces else 0):
            keys = torch.cat([node.kv[layer][0][:, :count] for node, count in pieces], dim=1)
            values = torch.cat([node.kv[layer][1][:, :count] for node, count in pieces], dim=1)
            self.runner.seed_layer(cache, layer, keys.unsqueeze(0), values.unsqueeze(0))  # cat made new tensors
        return cache, sum(count for _, count in pieces)

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
        along `chains`, top-down: every level in one flat pass where they fit one (a level reads
        its parent level in the pass), else a pass (or batches) per level."""
        if shared_levels_in_one_pass(self, self.scheduler.shared_nodes(chains)):
            return
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


def _stop_ids(model, tokenizer) -> frozenset[int]:
    ids: set[int] = set()
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in eos if isinstance(eos, (list, tuple)) else [eos]:
        if value is not None:
            ids.add(int(value))
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return frozenset(ids)


