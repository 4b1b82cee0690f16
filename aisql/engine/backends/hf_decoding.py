"""Generating for a batch on the built-in engine: the prompts prefilled in one pass, then decoded
together — greedy with prompt-lookup drafts verified in the same pass (lossless), sampled rows
from their own seeded generators (never drafted), constrained rows (typed literals, JSON schemas)
choosing the likeliest token that keeps the output valid. Rows leave the batch as they stop.
"""

from __future__ import annotations

import torch

from aisql.engine.backends.hf_scoring import BatchEngine
from aisql.engine.base import GenerateRequest, Generation
from aisql.engine.batch.scheduler import Work
from aisql.engine.decoding.decode import DecodeRow, decode_pass, greedy_accept, settle
from aisql.engine.decoding.json_constraint import DEAD_END, check_budget, row_constraint
from aisql.engine.decoding.token_sampling import sample_token, seeded_generator


class BatchDecode:
    """One batch's generation, from its prefill to each row's stop (`run`)."""

    def __init__(self, engine: BatchEngine, batch: list[Work], requests: list[GenerateRequest], reuse: bool, speculative: bool) -> None:
        self.engine, self.requests = engine, requests
        out = engine.run_rows(batch, keep_cache=True, store=reuse)
        self.cache, self.mask = out.cache, out.mask
        rows = torch.arange(len(batch), device=engine.device)
        first_logits = engine.runner.logits(out.hidden[rows, torch.tensor(out.lengths, device=engine.device) - 1])
        # Constrained rows: the most likely token that keeps the output valid, and a closing that
        # fits the budget (aisql.engine.decoding.json_constraint).
        self.constraints = [row_constraint(r.grammar, engine.tokenizer, tuple(engine.stop_ids)) if r.grammar else None for r in requests]
        for constraint, request in zip(self.constraints, requests):
            check_budget(constraint, request.max_tokens)
        # Sampled rows (temperature > 0): each from its own seeded generator, never with drafts.
        self.generators = [seeded_generator(r.seed if r.seed is not None else 0, engine.device) if r.temperature > 0 else None for r in requests]
        drafting = speculative and engine.speculation is not None
        self.indexes = [engine.drafter(list(r.prompt_ids)) for r in requests] if drafting else None
        self.outputs: list[list[int]] = [[] for _ in batch]
        self.steps = [0] * len(batch)
        self.finish: list[str | None] = [None] * len(batch)
        self.decode_rows = [DecodeRow(-1, out.prefix_lengths[b] + out.lengths[b]) for b in range(len(batch))]
        self.active = list(range(len(batch)))
        self.chosen = {b: self._first_tokens(b, first_logits[b]) for b in self.active}  # chosen tokens not yet emitted

    def _first_tokens(self, b: int, logits: torch.Tensor) -> list[int]:
        """Row b's first token: sampled (its generator's first draw, taken even where a
        constraint then chooses), constrained, or the likeliest."""
        request = self.requests[b]
        token = int(torch.argmax(logits, dim=-1))
        if self.generators[b] is not None:
            token = sample_token(logits, request.temperature, request.top_p, self.generators[b])
        if self.constraints[b] is not None:
            return self.constraints[b].next(logits, request.max_tokens)
        return [token]

    def run(self) -> list[Generation]:
        while self._emit():
            self._step()
        self.engine.stats.generated_tokens += sum(self.steps)
        tokenizer = self.engine.tokenizer
        return [
            Generation(
                token_ids=tuple(output),
                text=tokenizer.decode(output, skip_special_tokens=True).strip(),
                finish_reason=self.finish[b] or "length",
                steps=self.steps[b],
            )
            for b, output in enumerate(self.outputs)
        ]

    def _emit(self) -> bool:
        """Emit the chosen tokens, stopping rows at an end token or at max_tokens; the stopped
        rows leave the batch's cache. False when no row goes on."""
        still = []
        stop_ids = self.engine.stop_ids
        for b in self.active:
            for token in self.chosen[b]:
                self.steps[b] += 1
                if token in stop_ids or token == DEAD_END:
                    self.finish[b] = "stop"
                    break
                self.outputs[b].append(token)
                if len(self.outputs[b]) >= self.requests[b].max_tokens:
                    self.finish[b] = "length"
                    break
            if self.finish[b] is None:
                still.append(b)
                self.decode_rows[b].feed = self.outputs[b][-1]
                if self.indexes:
                    self.indexes[b].extend(self.chosen[b])
        if not still:
            return False
        if len(still) != len(self.active):
            keep = torch.tensor([self.active.index(b) for b in still], device=self.engine.device)
            self.cache.batch_select_indices(keep)
            self.mask = self.mask[keep]
        self.active = still
        return True

    def _step(self) -> None:
        """One decode pass over the active rows, drafts verified in it."""
        engine, requests = self.engine, self.requests
        for b in self.active:
            limit = requests[b].max_tokens - len(self.outputs[b]) - 1
            self.decode_rows[b].draft = self.indexes[b].propose(limit) if self.indexes and self.generators[b] is None else []
        step_rows = [self.decode_rows[b] for b in self.active]
        step = decode_pass(engine.runner, self.cache, self.mask, step_rows)
        accepted = [self._accept(b, step.logits[row]) for row, b in enumerate(self.active)]
        settle(engine.runner, engine.stats, step, step_rows, accepted)
        self.mask = step.mask

    def _accept(self, b: int, logits: torch.Tensor) -> int:
        """Row b's next tokens from its pass: a sampled token, or the drafts the model agrees
        with (under the row's constraint) plus its own next token. Returns the drafts kept."""
        request, draft = self.requests[b], self.decode_rows[b].draft
        if self.generators[b] is not None:
            self.chosen[b] = [sample_token(logits[0], request.temperature, request.top_p, self.generators[b])]
            return 0
        if self.constraints[b] is not None:  # drafts verified under the constraint: lossless
            self.chosen[b], kept = self.constraints[b].verify(draft, logits, request.max_tokens - len(self.outputs[b]))
        else:
            self.chosen[b], kept = greedy_accept(draft, logits)
        if self.indexes:
            self.indexes[b].feedback(len(draft), kept)
        return kept
