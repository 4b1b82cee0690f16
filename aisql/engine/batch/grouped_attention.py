"""Masked attention for grouped-query models without repeating the KV heads.

transformers' SDPA path repeats every key/value head `num_key_value_groups` times (a copy of the
whole KV per layer per pass) whenever a mask is given and more than one query is asked: a decode
pass that verifies speculative drafts over a batch's padded cache, a padded batch of prompts. On
CPU that copy costs more than the attention itself (measured, SmolLM2 shapes, 4 rows x 2,000 slots,
5 queries: 9.4 ms per layer with the copy, 3.4 ms without).

Instead the queries of the heads that share one KV head are stacked along the query axis — [B, H,
q, D] -> [B, Hkv, groups * q, D] — and the mask's rows repeated to match, so SDPA reads each KV
head once. Every query row is computed by the same kernel over the same keys; the outputs equal the
repeated form's to float rounding (the kernel's blocking follows the number of query rows, so the
last bit can move — as it already did with the batch's size — checked in
tests/test_grouped_attention.py). transformers does the same for a single query (`pack_gqa`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def grouped_sdpa(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask, scaling=None, **kwargs):
    """(output [B, q, H, D], None) as transformers' attention functions return, or None where this
    form does not apply (one query — transformers packs that itself —, no mask, a per-head mask,
    dropout, soft-capping or a position bias): the caller then runs plain SDPA."""
    groups = getattr(module, "num_key_value_groups", 1)
    batch, heads, queries, dim = query.shape
    if (
        groups <= 1
        or queries == 1
        or mask is None
        or mask.dim() != 4
        or mask.shape[1] != 1
        or kwargs.get("dropout", 0.0)
        or kwargs.get("softcap") is not None
        or kwargs.get("position_bias") is not None
        or key.shape[1] * groups != heads
    ):
        return None
    stacked = query.reshape(batch, heads // groups, groups * queries, dim)
    rows = mask.expand(batch, 1, queries, mask.shape[-1]).repeat(1, 1, groups, 1)
    out = F.scaled_dot_product_attention(stacked, key, value, attn_mask=rows, scale=scaling)
    return out.reshape(batch, heads, queries, value.shape[-1]).transpose(1, 2).contiguous(), None
