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

The model is transformers' own: this module registers an attention function ("aisql") that does
the above while a flat pass is running and is plain SDPA otherwise, so every other path (batched
generation, serving) runs unchanged.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Sequence

import torch
import torch.nn.functional as F

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


@dataclass
class _Group:
    """Segments reading one prefix: contiguous in the flat sequence."""

    prefix: RadixNode
    prefix_len: int
    begin: int  # first flat position
    end: int
    mask: torch.Tensor | None = None  # [T_g, P + T_g]
    prefix_kv: list[LayerKV] = field(default_factory=list)  # per layer, [Hkv, P, D]


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
            return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
        return _flat_attention(flat, module, query, key, value, kwargs.get("scaling"))

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
        group.mask = _group_mask([segments[i] for i in members], members, offsets, group, device)
        if group.prefix_len:
            group.prefix_kv = radix.gather(group.prefix, group.prefix_len)
    state = _Pass([g for g, _ in groups], layers)
    ids = torch.tensor([flat_ids], dtype=torch.long, device=device)
    positions = torch.tensor([flat_positions], dtype=torch.long, device=device)
    _active.flat = state
    try:
        hidden = decoder(input_ids=ids, position_ids=positions, **{cache_kwarg: None, "use_cache": False}).last_hidden_state
    finally:
        _active.flat = None
    return FlatOutput(hidden[0], offsets, [k[0] for k in state.keys], [v[0] for v in state.values])


def _group(segments: Sequence[Segment]) -> tuple[list[int], list[tuple[_Group, list[int]]]]:
    """Segment order in the flat sequence, and the groups reading one prefix (a segment that
    continues another belongs to its group, right after it)."""
    roots = [i for i, s in enumerate(segments) if s.parent is None]
    children: dict[int, list[int]] = {}
    for i, s in enumerate(segments):
        if s.parent is not None:
            children.setdefault(s.parent, []).append(i)
    by_prefix: dict[tuple[int, int], list[int]] = {}
    for i in roots:
        key = (id(segments[i].prefix), segments[i].prefix_len)
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


def _flat_attention(state: _Pass, module, query, key, value, scaling):
    """query [1, H, T, D], key/value [1, Hkv, T, D] of the flat sequence -> [1, T, H, D]."""
    layer = module.layer_idx
    state.keys[layer], state.values[layer] = key, value
    out = torch.empty_like(query)
    for group in state.groups:
        q = query[:, :, group.begin : group.end]
        k = key[:, :, group.begin : group.end]
        v = value[:, :, group.begin : group.end]
        if group.prefix_len:
            prefix_k, prefix_v = group.prefix_kv[layer]
            k = torch.cat([prefix_k.unsqueeze(0).to(k.dtype), k], dim=2)
            v = torch.cat([prefix_v.unsqueeze(0).to(v.dtype), v], dim=2)
        out[:, :, group.begin : group.end] = F.scaled_dot_product_attention(
            q, k, v, attn_mask=group.mask, scale=scaling, enable_gqa=True
        )
    return out.transpose(1, 2).contiguous(), None
