"""The serving loop's step where the mixed pass cannot run (attention it does not cover: sliding
windows, soft-capping): each prompt chunk in its own pass on the prompt's DynamicCache, then one
decode pass over the running requests' padded batch cache (aisql.engine.continuous.batch)."""

from __future__ import annotations

import torch

from aisql.engine.continuous.batch import RunningBatch
from aisql.engine.continuous.next_token import choose_token
from aisql.engine.decoding.decode import DecodeRow, decode_pass, greedy_accept, settle


class SeparatePasses:
    def __init__(self, loop) -> None:
        self.loop = loop  # aisql.engine.continuous.loop.ServingEngine: drafts, first tokens, delivery
        self.runner = loop.runner
        self.batch = RunningBatch(self.runner)

    @property
    def rows(self) -> list:
        return self.batch.rows

    def keep(self, rows: list[int]) -> None:
        self.batch.keep(rows)

    def clear(self) -> None:
        self.batch = RunningBatch(self.runner)

    def run(self, chunks) -> None:
        for state, tokens in chunks:
            self._prefill_chunk(state, tokens)
        if self.batch.rows:
            self._decode()

    def _prefill_chunk(self, state, tokens: int) -> None:
        """Run the next `tokens` of a prompt; when the whole prompt is in, it joins the batch."""
        prompt = state.handle.request.prompt_ids
        end = min(len(prompt), state.done + tokens)
        ids = torch.tensor([prompt[state.done : end]], device=self.runner.device)
        positions = torch.arange(state.done, end, device=self.runner.device).unsqueeze(0)
        hidden = self.runner.forward(ids, state.cache, position_ids=positions)
        self.runner.count(end - state.done, state.done)
        state.done = end
        if end < len(prompt):
            return
        layers = state.cache.layers

        def kv_of(start: int, stop: int):
            return [(layer.keys[0, :, start:stop].clone(), layer.values[0, :, start:stop].clone()) for layer in layers]

        sequence = self.loop.prompt_done(state, self.runner.logits(hidden[:, -1])[0], kv_of, None)
        if sequence is not None:
            self.batch.join([sequence], state.cache, torch.ones((1, len(prompt)), dtype=torch.long, device=self.runner.device))

    def _decode(self) -> None:
        batch = self.batch
        rows = [DecodeRow(s.feed, s.position, self.loop.draft(s)) for s in batch.rows]
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
        settle(self.runner, self.loop.engine.stats, out, rows, accepted)
        keep = []
        for index, (sequence, row, tokens) in enumerate(zip(batch.rows, rows, chosen)):
            sequence.position = row.position
            if not self.loop.deliver(sequence, tokens, out.logits[index], lambda count, i=index: batch.row_kv(i, count)):
                keep.append(index)
        batch.keep(keep)
