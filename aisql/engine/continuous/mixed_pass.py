"""One forward pass carrying every running request's decode tokens and prompt chunks together
(as vLLM v1 and Sarathi-Serve schedule: decode rows ride in the prefill's pass, under one token
budget), so the weights are read once per pass for both and a prompt being prefilled no longer
stalls the requests decoding.

A pass is a list of pieces, each some new tokens of one sequence at its next positions: a running
request's last token plus its speculative draft, or the next chunk of a prompt. All pieces' tokens
form one flat sequence through the model's linear layers (MLP, projections); attention runs per
piece, each over its own sequence's KV as it lies (aisql.engine.continuous.sequence_kv: the
piece's new keys written in place first), causal within the piece. The query heads sharing a KV
head are stacked along the query axis, so each KV head is read once (as grouped_attention does
for the padded batch). Positions are explicit, so a row computes what it would alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from aisql.engine.batch import flat
from aisql.engine.continuous.next_token import choose_token
from aisql.engine.continuous.sequence_kv import SequenceKV
from aisql.engine.decoding.decode import greedy_accept


@dataclass
class Piece:
    kv: SequenceKV  # the sequence's KV: positions [0, start) valid before the pass
    tokens: Sequence[int]
    start: int  # position of tokens[0]


@dataclass
class MixedOutput:
    hidden: torch.Tensor  # [T, H]: final hidden states of every piece's tokens, in piece order
    offsets: list[int]  # flat position of each piece's first token


class _MixedAttention:
    def __init__(self, pieces: Sequence[Piece], offsets: list[int]) -> None:
        self.pieces = pieces
        self.offsets = offsets
        self._masks: dict[tuple[int, int, int], torch.Tensor] = {}  # (n, start, groups) -> mask, shared by layers

    def _mask(self, tokens: int, start: int, groups: int, device) -> torch.Tensor | None:
        """[groups * n, start + n]: the sequence so far visible to every token, the piece causal;
        None for one token (it sees everything)."""
        if tokens == 1:
            return None
        key = (tokens, start, groups)
        if key not in self._masks:
            causal = torch.ones((tokens, tokens), dtype=torch.bool, device=device).tril()
            rows = torch.cat([torch.ones((tokens, start), dtype=torch.bool, device=device), causal], dim=1)
            self._masks[key] = rows.repeat(groups, 1)
        return self._masks[key]

    def attend(self, module, query, key, value, scaling):
        """query [1, H, T, D], key/value [1, Hkv, T, D] of the flat sequence -> [1, T, H, D]."""
        layer = module.layer_idx
        heads, kv_heads, dim = query.shape[1], key.shape[1], query.shape[3]
        groups = heads // kv_heads
        out = torch.empty_like(query)
        for piece, begin in zip(self.pieces, self.offsets):
            n = len(piece.tokens)
            end = begin + n
            piece.kv.write(layer, piece.start, key[0, :, begin:end], value[0, :, begin:end])
            stacked = query[0, :, begin:end].reshape(kv_heads, groups * n, dim)
            if _flash_with_lse is not None and query.device.type == "cpu":
                attended = _in_two_parts(piece, layer, stacked, groups, scaling)
            else:
                keys, values = piece.kv.view(layer, piece.start + n)
                mask = self._mask(n, piece.start, groups, query.device)
                attended = F.scaled_dot_product_attention(stacked, keys, values, attn_mask=mask, scale=scaling)
            out[0, :, begin:end] = attended.reshape(heads, n, dim)
        return out.transpose(1, 2).contiguous(), None


# On a CPU, a piece of several tokens (a prompt chunk, a draft being verified) attends to its
# sequence so far without a mask and to itself causally, two calls of CPU flash attention merged by
# their log-sum-exps (as aisql.engine.batch.flat's cascade does), instead of one masked call: per
# layer, SmolLM2's heads, 2 threads, AMD EPYC (AVX-512), 128 tokens after 1,000: 10.5 ms masked,
# 3.0 ms for the two parts before the merge; 16 after 2,000: 1.6 -> 0.8 ms. A one-token piece is one
# unmasked flash call (SDPA's dispatcher picks its math kernel there: 138 -> 91 us at 1,000 keys).
_flash_with_lse = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def _in_two_parts(piece: Piece, layer: int, stacked: torch.Tensor, groups: int, scaling) -> torch.Tensor:
    """stacked [Hkv, G * n, D] (the query heads sharing a KV head stacked, head-group major) ->
    [Hkv, G * n, D]: attention over positions [0, start + n), causal within the piece."""
    kv_heads, rows, dim = stacked.shape
    n = rows // groups
    start = piece.start
    keys, values = piece.kv.view(layer, start + n)
    if n == 1:  # one token sees everything: one unmasked call (flash: 91 vs 138 us at 1,000 keys)
        return _flash_with_lse(stacked.unsqueeze(0), keys.unsqueeze(0), values.unsqueeze(0), 0.0, False, scale=scaling)[0][0]
    # The piece against itself, causally: the query groups as a batch over the piece's own keys.
    own_q = stacked.reshape(kv_heads, groups, n, dim).transpose(0, 1)  # [G, Hkv, n, D]
    own_k = keys[:, start:].unsqueeze(0).expand(groups, -1, -1, -1)
    own_v = values[:, start:].unsqueeze(0).expand(groups, -1, -1, -1)
    b, lb = _flash_with_lse(own_q, own_k, own_v, 0.0, True, scale=scaling)[:2]
    b = b.transpose(0, 1).reshape(kv_heads, rows, dim)
    if start == 0:
        return b
    lb = lb.transpose(0, 1).reshape(kv_heads, rows)
    # Every query against the sequence before the piece: no mask.
    a, la = _flash_with_lse(stacked.unsqueeze(0), keys[:, :start].unsqueeze(0), values[:, :start].unsqueeze(0), 0.0, False, scale=scaling)[:2]
    a, la = a[0], la[0]
    top = torch.maximum(la, lb)
    wa, wb = (la - top).exp_(), (lb - top).exp_()
    total = wa + wb
    return (a.float() * (wa / total).unsqueeze(-1) + b.float() * (wb / total).unsqueeze(-1)).to(stacked.dtype)


def run_mixed(runner, pieces: Sequence[Piece]) -> MixedOutput:
    """One forward pass over the pieces; each piece's KV is written into its sequence's buffers
    (the caller moves `kv.length` once it knows which tokens stay)."""
    device = runner.device
    ids: list[int] = []
    positions: list[int] = []
    offsets = []
    for piece in pieces:
        offsets.append(len(ids))
        ids.extend(piece.tokens)
        positions.extend(range(piece.start, piece.start + len(piece.tokens)))
    state = _MixedAttention(pieces, offsets)
    with flat.active(state):
        hidden = runner.decoder(
            input_ids=torch.tensor([ids], dtype=torch.long, device=device),
            position_ids=torch.tensor([positions], dtype=torch.long, device=device),
            **{runner.cache_kwarg: None, "use_cache": False},
        ).last_hidden_state
    runner.stats.forward_passes += 1
    return MixedOutput(hidden[0], offsets)


class MixedPasses:
    """The serving loop's step as one mixed pass: the running requests (each with its own
    SequenceKV) decode, the planned prompt chunks run, in the same forward pass."""

    def __init__(self, loop) -> None:
        self.loop = loop  # aisql.engine.continuous.loop.ServingEngine: drafts, first tokens, delivery
        self.runner = loop.runner
        self.rows: list = []  # Running, in row order

    def keep(self, rows: list[int]) -> None:
        self.rows = [self.rows[row] for row in rows]

    def clear(self) -> None:
        self.rows = []

    def run(self, chunks) -> None:
        """Every running request's decode and the chunks ((Prefilling, tokens), in order) in one pass."""
        loop = self.loop
        drafts = [loop.draft(sequence) for sequence in self.rows]
        pieces = [Piece(s.kv, [s.feed] + draft, s.position) for s, draft in zip(self.rows, drafts)]
        runs = []
        for state, tokens in chunks:
            prompt = state.handle.request.prompt_ids
            end = min(len(prompt), state.done + tokens)
            pieces.append(Piece(state.cache, prompt[state.done : end], state.done))
            runs.append((state, end))
        if not pieces:
            return
        out = run_mixed(self.runner, pieces)
        # One pass through the output head: every decode position, and each finished prompt's last.
        picks = [out.offsets[i] + j for i, draft in enumerate(drafts) for j in range(1 + len(draft))]
        for i, (state, end) in enumerate(runs):
            if end == len(state.handle.request.prompt_ids):
                picks.append(out.offsets[len(drafts) + i] + len(pieces[len(drafts) + i].tokens) - 1)
        logits = self.runner.logits(out.hidden[torch.tensor(picks, device=self.runner.device)]) if picks else None
        if drafts and runs:
            loop.stats.mixed_passes += 1
        cursor = self._decoded(drafts, logits)
        joining = []
        for state, end in runs:
            self.runner.count(end - state.done, state.done)
            state.done = state.cache.length = end
            if end == len(state.handle.request.prompt_ids):
                sequence = loop.prompt_done(state, logits[cursor], state.cache.kv_of, state.cache)
                cursor += 1
                if sequence is not None:
                    joining.append(sequence)
        self.rows.extend(joining)

    def _decoded(self, drafts: list[list[int]], logits: torch.Tensor | None) -> int:
        """The running requests take their tokens from the pass's logits (greedy ones keep the
        draft's longest agreeing prefix); finished ones leave. Returns the logits rows read."""
        if not drafts:
            return 0
        stats, cursor, keep = self.loop.engine.stats, 0, []
        for sequence, draft in zip(self.rows, drafts):
            rows = logits[cursor : cursor + 1 + len(draft)]
            cursor += 1 + len(draft)
            if sequence.request.greedy:
                tokens, kept = greedy_accept(draft, rows)
            else:
                tokens, kept = [choose_token(sequence, rows[0])[0]], 0
            if sequence.drafts is not None:
                sequence.drafts.feedback(len(draft), kept)
            self.runner.count(1 + kept, sequence.position)
            stats.flops += self.runner.profile.flops(len(draft) - kept, sequence.position + 1 + kept)
            stats.draft_tokens += len(draft)
            stats.draft_accepted_tokens += kept
            sequence.position += 1 + kept
            sequence.kv.length = sequence.position  # a rejected draft's slots are overwritten next pass
            if not self.loop.deliver(sequence, tokens, rows, lambda count, kv=sequence.kv: kv.kv_of):
                keep.append(sequence)
        stats.decode_passes += 1
        self.rows = keep
        return cursor
