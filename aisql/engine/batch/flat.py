"""Flattened forward passes: every row's new tokens in one sequence, no padding, no copies of
cached prefixes per row (as vLLM flattens a batch).

A pass is a list of segments. A segment is some new tokens of one sequence: a request's tokens
after its cached prefix, or a label's tail after its request's tokens (so multi-token labels are
scored in the same pass). Each segment attends to
- its cached prefix, read from the radix tree (one copy per distinct prefix per pass, none per row),
- the tokens of the segment it continues (a label tail sees its request's tokens),
- its own tokens up to itself (causal).
Segments reading the same prefix form a group; attention runs per group with one masked
`scaled_dot_product_attention` call, reading grouped keys/values directly (`enable_gqa`, no
repeat). Positions are explicit, so results do not depend on what a row is batched with.

A group of many short independent segments (the suffixes of one anchor's prompts: a join's
products after a customer's profile) would spend most of one [T, P + T] attention on the masked
blocks between segments. Such a group runs as a batch instead: each segment padded to the
longest, its queries against the prefix plus its own keys under one causal mask ([S, L, P + L]
in all, not [T, P + T]), when that is the smaller product; 3-6x less attention time measured on
join-shaped groups. Padded positions only ever attend (their rows are dropped), never are attended:
causality alone keeps a real token from seeing them.

The model is transformers' own: this module registers an attention function ("aisql") that does
the above while a flat pass is running and is SDPA otherwise (grouped heads read without repeating
the KV: aisql.engine.batch.grouped_attention), so every other path (batched generation, serving)
computes what transformers' SDPA computes.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import torch
import torch.nn.functional as F

from aisql.engine.batch.grouped_attention import grouped_sdpa
from aisql.engine.kv.radix import LayerKV, RadixCache, RadixNode

ATTENTION = "aisql"
_active = threading.local()  # the pass in flight (engine calls are serialised by the engine lock)
SUPPORTED_MODEL_TYPES = {"llama", "qwen2", "qwen3", "mistral"}


@dataclass
class Segment:
    prefix: RadixNode  # deepest cached node it reads (the root for none)
    prefix_len: int  # tokens of that path to read
    tokens: Sequence[int]
    start: int  # position of tokens[0] in its sequence
    parent: int | None = None  # index of the segment it continues (its tokens are visible)
    # Index of a segment of the same pass whose path is this one's prefix: a tree level computed
    # in the pass that reads it (`prefix`/`prefix_len` are then the chain's cached start).
    reads: int | None = None


@dataclass
class _Group:
    """Segments reading one prefix: contiguous in the flat sequence."""

    prefix: RadixNode
    prefix_len: int  # prefix tokens every member sees: the cached ones, then the in-pass chain's
    begin: int  # first flat position
    end: int
    cached_len: int = 0  # of those, read from the prefix tree
    chain: list[tuple[int, int]] = field(default_factory=list)  # flat [begin, end) of the in-pass segments read, root first
    mask: torch.Tensor | None = None  # [T_g, P + T_g]; or [L, P + L] when batched
    prefix_kv: list[LayerKV] = field(default_factory=list)  # per layer, [Hkv, P, D]
    batched: "_Batched | None" = None  # the group run as a padded batch of its segments


@dataclass
class _Batched:
    """A group's segments as a padded batch: `gather` picks each padded slot's flat position in
    the group (S * L of them), `keep` the slots that hold real tokens, in the group's order."""

    segments: int
    length: int
    gather: torch.Tensor
    keep: torch.Tensor


@dataclass
class FlatOutput:
    hidden: torch.Tensor  # [T, H]: final hidden states of every flat position
    offsets: list[int]  # flat position of each segment's first token, in segment order
    keys: list[torch.Tensor]  # per layer: [Hkv, T, D] keys of the new tokens (flat order)
    values: list[torch.Tensor]

    def last(self, segment: int, length: int) -> int:
        return self.offsets[segment] + length - 1

    def kv(self, segment: int, start: int, end: int) -> list[LayerKV]:
        """Cloned KV of a segment's tokens [start, end) (relative to the segment)."""
        first = self.offsets[segment] + start
        last = self.offsets[segment] + end
        return [(k[:, first:last].clone(), v[:, first:last].clone()) for k, v in zip(self.keys, self.values)]


class _Pass:
    def __init__(self, groups: list[_Group], layers: int) -> None:
        self.groups = groups
        self.keys: list[torch.Tensor | None] = [None] * layers
        self.values: list[torch.Tensor | None] = [None] * layers

    def attend(self, module, query, key, value, scaling):
        return _flat_attention(self, module, query, key, value, scaling)


@contextmanager
def active(state) -> Iterator[None]:
    """While the block runs, the "aisql" attention of this thread's forward passes is
    `state.attend(module, query [1, H, T, D], key, value [1, Hkv, T, D], scaling)` -> ([1, T, H, D],
    None), and the model builds no mask (the state knows what each token sees). The flat pass
    here and the serving loop's mixed pass (aisql.engine.continuous.mixed_pass) are such states."""
    _active.flat = state
    try:
        yield
    finally:
        _active.flat = None


def register() -> None:
    """Make "aisql" an attention implementation transformers knows (idempotent)."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask

    if ATTENTION in ALL_MASK_ATTENTION_FUNCTIONS:
        return

    def attention(module, query, key, value, attention_mask, **kwargs):
        flat = getattr(_active, "flat", None)
        if flat is None:
            grouped = grouped_sdpa(module, query, key, value, attention_mask, **kwargs)
            return grouped if grouped is not None else sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
        return flat.attend(module, query, key, value, kwargs.get("scaling"))

    def mask(*args, **kwargs):
        if getattr(_active, "flat", None) is not None:
            return None  # the flat pass builds its own per group
        return sdpa_mask(*args, **kwargs)

    AttentionInterface.register(ATTENTION, attention)
    AttentionMaskInterface.register(ATTENTION, mask)


def supported(model) -> bool:
    config = model.config
    return (
        config.model_type in SUPPORTED_MODEL_TYPES
        and not getattr(config, "sliding_window", None)
        and getattr(config, "attn_logit_softcapping", None) is None
    )


def run_flat(model, decoder, cache_kwarg: str, radix: RadixCache, segments: Sequence[Segment], pad_id: int) -> FlatOutput:
    """One forward pass over the segments (grouped by prefix, in the order given within a group)."""
    device = next(model.parameters()).device
    order, groups = _group(segments)
    offsets = [0] * len(segments)
    flat_ids: list[int] = []
    flat_positions: list[int] = []
    for index in order:
        segment = segments[index]
        offsets[index] = len(flat_ids)
        flat_ids.extend(segment.tokens)
        flat_positions.extend(range(segment.start, segment.start + len(segment.tokens)))
    layers = model.config.num_hidden_layers
    for group, members in groups:
        member_segments = [segments[i] for i in members]
        group.cached_len = group.prefix_len
        reads = member_segments[0].reads
        while reads is not None:  # the in-pass path this group reads, innermost first
            group.chain.insert(0, (offsets[reads], offsets[reads] + len(segments[reads].tokens)))
            reads = segments[reads].reads
        group.prefix_len += sum(end - begin for begin, end in group.chain)
        group.batched = _batched_layout(member_segments, group.prefix_len, device)
        if group.batched is not None:
            group.mask = _batched_mask(group.batched.length, group.prefix_len, device)
        else:
            group.mask = _group_mask(member_segments, members, offsets, group, device)
        if group.cached_len:
            group.prefix_kv = radix.gather(group.prefix, group.cached_len)
    state = _Pass([g for g, _ in groups], layers)
    ids = torch.tensor([flat_ids], dtype=torch.long, device=device)
    positions = torch.tensor([flat_positions], dtype=torch.long, device=device)
    with active(state):
        hidden = decoder(input_ids=ids, position_ids=positions, **{cache_kwarg: None, "use_cache": False}).last_hidden_state
    return FlatOutput(hidden[0], offsets, [k[0] for k in state.keys], [v[0] for v in state.values])


def _group(segments: Sequence[Segment]) -> tuple[list[int], list[tuple[_Group, list[int]]]]:
    """Segment order in the flat sequence, and the groups reading one prefix (a segment that
    continues another belongs to its group, right after it)."""
    roots = [i for i, s in enumerate(segments) if s.parent is None]
    children: dict[int, list[int]] = {}
    for i, s in enumerate(segments):
        if s.parent is not None:
            children.setdefault(s.parent, []).append(i)
    by_prefix: dict[tuple[int, int, int | None], list[int]] = {}
    for i in roots:
        key = (id(segments[i].prefix), segments[i].prefix_len, segments[i].reads)
        by_prefix.setdefault(key, []).extend([i, *children.get(i, [])])
    order: list[int] = []
    groups = []
    for members in by_prefix.values():
        first = segments[members[0]]
        begin = sum(len(segments[i].tokens) for i in order)
        order.extend(members)
        end = begin + sum(len(segments[i].tokens) for i in members)
        groups.append((_Group(first.prefix, first.prefix_len, begin, end), members))
    return order, groups


def _group_mask(members: list[Segment], indexes: list[int], offsets: list[int], group: _Group, device) -> torch.Tensor:
    """[T_g, P + T_g] booleans: the prefix is visible to all; a token sees its own segment's tokens
    up to itself and all of the segment it continues."""
    lengths = [len(s.tokens) for s in members]
    local = {index: position for position, index in enumerate(indexes)}
    seg = torch.repeat_interleave(torch.arange(len(members), device=device), torch.tensor(lengths, device=device))
    pos = torch.cat([torch.arange(n, device=device) for n in lengths]) if lengths else torch.zeros(0, dtype=torch.long, device=device)
    parent = torch.tensor([local.get(s.parent, -1) if s.parent is not None else -1 for s in members], device=device)
    same = (seg[:, None] == seg[None, :]) & (pos[None, :] <= pos[:, None])
    continued = parent[seg][:, None] == seg[None, :]
    new = same | continued
    visible_prefix = torch.ones((len(seg), group.prefix_len), dtype=torch.bool, device=device)
    return torch.cat([visible_prefix, new], dim=1)


BATCH_WHEN_BELOW = 0.7  # batched attention's score count over the block mask's, below which it is used


def _batched_layout(members: list[Segment], prefix_len: int, device) -> _Batched | None:
    """The padded-batch layout of a group, when its segments are independent (none continues
    another) and the batch computes fewer attention scores than the group's block mask."""
    if len(members) < 2 or any(s.parent is not None for s in members):
        return None
    lengths = [len(s.tokens) for s in members]
    longest, total = max(lengths), sum(lengths)
    if len(members) * longest * (prefix_len + longest) >= BATCH_WHEN_BELOW * total * (prefix_len + total):
        return None
    gather, keep, start = [], [], 0
    for index, n in enumerate(lengths):
        gather.extend(range(start, start + n))
        gather.extend([start] * (longest - n))  # padding slots: any real position, their rows are dropped
        keep.extend(range(index * longest, index * longest + n))
        start += n
    as_tensor = lambda values: torch.tensor(values, dtype=torch.long, device=device)  # noqa: E731
    return _Batched(len(members), longest, as_tensor(gather), as_tensor(keep))


def _batched_mask(length: int, prefix_len: int, device) -> torch.Tensor:
    """[L, P + L]: the prefix visible to every token, its own segment causally."""
    causal = torch.ones((length, length), dtype=torch.bool, device=device).tril()
    return torch.cat([torch.ones((length, prefix_len), dtype=torch.bool, device=device), causal], dim=1)


def _batched_attention(group: _Group, layer: int, q, k, v, key, value, scaling) -> torch.Tensor:
    """q [H, T_g, D], k/v [Hkv, T_g, D] of one group (key/value: the whole pass's, for an
    in-pass prefix) -> [H, T_g, D], attention per segment."""
    batch = group.batched
    segments, length = batch.segments, batch.length

    def padded(x):  # [heads, T_g, D] -> [S, heads, L, D]
        heads, _, dim = x.shape
        return x.index_select(1, batch.gather).view(heads, segments, length, dim).transpose(0, 1)

    prefix = _prefix(group, layer, key, value)
    if _cascades(group, q.device):
        return _cascade_attention(group, prefix, q, padded(q), padded(k), padded(v), scaling)
    qs, ks, vs = padded(q), padded(k), padded(v)
    if prefix is not None:
        prefix_k, prefix_v = prefix
        shape = (segments, *prefix_k.shape)
        ks = torch.cat([prefix_k.to(ks.dtype).unsqueeze(0).expand(shape), ks], dim=2)
        vs = torch.cat([prefix_v.to(vs.dtype).unsqueeze(0).expand(shape), vs], dim=2)
    out = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=group.mask, scale=scaling, enable_gqa=True)
    heads, dim = out.shape[1], out.shape[3]
    return out.transpose(0, 1).reshape(heads, segments * length, dim).index_select(1, batch.keep)


# A batched group reads its cached prefix in place (no copy of it per segment and layer) where that
# measured faster: per layer on tiny-32k's heads (8 query, 2 KV, 64 wide), 2 threads, AMD EPYC,
# prefix P x S segments of L tokens, concatenation vs in place: 1600 x 32 x 8 70.2 -> 26.0 ms,
# 400 x 32 x 24 26.1 -> 15.1, 800 x 8 x 24 13.1 -> 10.2, 200 x 8 x 24 4.0 -> 3.9; where P < 6 L
# the merge costs more than the copy it saves (400 x 32 x 64 49.3 -> 61.9, 16 x 4 x 239 11.7 ->
# 14.4, 200 x 8 x 64 9.9 -> 12.3), and so with few segments (170 x 2 x 25 0.63 -> 0.77).
CASCADE_PREFIX_OVER_SEGMENT = 12
CASCADE_MIN_PREFIX = 200
CASCADE_MIN_SEGMENTS = 8
_flash_with_lse = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def _cascades(group: _Group, device) -> bool:
    batch = group.batched
    return (
        _flash_with_lse is not None
        and group.prefix_len >= max(CASCADE_MIN_PREFIX, CASCADE_PREFIX_OVER_SEGMENT * batch.length)
        and batch.segments >= CASCADE_MIN_SEGMENTS
        and device.type == "cpu"
    )


def _prefix(group: _Group, layer: int, key, value) -> LayerKV | None:
    """The keys and values every member of the group sees before its own tokens, [Hkv, P, D]:
    the cached prefix as gathered for the pass, then the in-pass segments it reads (this layer's
    keys of the pass; none are copied when there is only one part)."""
    parts = []
    if group.cached_len:
        cached_k, cached_v = group.prefix_kv[layer]
        parts.append((cached_k.to(key.dtype), cached_v.to(value.dtype)))
    parts += [(key[0, :, begin:end], value[0, :, begin:end]) for begin, end in group.chain]
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    return torch.cat([k for k, _ in parts], dim=1), torch.cat([v for _, v in parts], dim=1)


def _cascade_attention(group: _Group, prefix: LayerKV, q, qs, ks, vs, scaling) -> torch.Tensor:
    """A batched group's attention in two parts merged by their log-sum-exps (as FlashInfer's and
    vLLM's cascade attention do): every query of the group against the cached prefix in one
    unmasked call over the group's prefix KV as gathered for the pass (one copy per pass, none per
    segment and layer; the query heads sharing a KV head stacked along the query axis), and each segment causally against its own keys; then
    out = (a * e^la + b * e^lb) / (e^la + e^lb). Equal to attending over the concatenation, to
    float rounding. q [H, T_g, D]; qs [S, H, L, D], ks/vs [S, Hkv, L, D] -> [H, T_g, D]."""
    batch = group.batched
    heads, tokens, dim = q.shape
    kv_heads = ks.shape[1]
    prefix_k, prefix_v = prefix
    stacked = q.reshape(1, kv_heads, (heads // kv_heads) * tokens, dim)
    a, la = _flash_with_lse(stacked, prefix_k.to(q.dtype).unsqueeze(0), prefix_v.to(q.dtype).unsqueeze(0), 0.0, False, scale=scaling)
    a, la = a.reshape(heads, tokens, dim), la.reshape(heads, tokens)
    b, lb = _flash_with_lse(qs, ks, vs, 0.0, True, scale=scaling)  # [S, H, L, D], [S, H, L]
    b = b.transpose(0, 1).reshape(heads, batch.segments * batch.length, dim).index_select(1, batch.keep)
    lb = lb.transpose(0, 1).reshape(heads, batch.segments * batch.length).index_select(1, batch.keep)
    top = torch.maximum(la, lb)
    wa, wb = (la - top).exp_(), (lb - top).exp_()
    total = wa + wb
    return (a.float() * (wa / total).unsqueeze(-1) + b.float() * (wb / total).unsqueeze(-1)).to(q.dtype)


def _flat_attention(state: _Pass, module, query, key, value, scaling):
    """query [1, H, T, D], key/value [1, Hkv, T, D] of the flat sequence -> [1, T, H, D]."""
    layer = module.layer_idx
    state.keys[layer], state.values[layer] = key, value
    out = torch.empty_like(query)
    for group in state.groups:
        if group.batched is not None:
            rows = slice(group.begin, group.end)
            out[0, :, rows] = _batched_attention(group, layer, query[0, :, rows], key[0, :, rows], value[0, :, rows], key, value, scaling)
            continue
        q = query[:, :, group.begin : group.end]
        k = key[:, :, group.begin : group.end]
        v = value[:, :, group.begin : group.end]
        prefix = _prefix(group, layer, key, value)
        if prefix is not None:
            k = torch.cat([prefix[0].unsqueeze(0), k], dim=2)
            v = torch.cat([prefix[1].unsqueeze(0), v], dim=2)
        out[:, :, group.begin : group.end] = F.scaled_dot_product_attention(
            q, k, v, attn_mask=group.mask, scale=scaling, enable_gqa=True
        )
    return out.transpose(1, 2).contiguous(), None
