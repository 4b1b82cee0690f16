"""Grouped-query attention without repeated KV heads (aisql.engine.batch.grouped_attention): the
numbers of transformers' repeat-the-heads SDPA (to float rounding: the kernel's blocking follows the
number of query rows) and the same model outputs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from aisql.engine.batch.grouped_attention import grouped_sdpa


class _Module:
    def __init__(self, groups: int) -> None:
        self.num_key_value_groups = groups


def _repeated(query, key, value, mask, groups):
    batch, kv_heads, slots, dim = key.shape
    key = key[:, :, None].expand(batch, kv_heads, groups, slots, dim).reshape(batch, kv_heads * groups, slots, dim)
    value = value[:, :, None].expand(batch, kv_heads, groups, slots, dim).reshape(batch, kv_heads * groups, slots, dim)
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask).transpose(1, 2)


@pytest.mark.parametrize(
    "batch,kv_heads,groups,queries,slots,dtype",
    [(4, 3, 3, 5, 200, torch.float32), (1, 2, 7, 40, 90, torch.float32), (3, 3, 3, 7, 129, torch.bfloat16), (2, 1, 4, 2, 33, torch.float32)],
)
def test_equal_to_repeated_heads(batch, kv_heads, groups, queries, slots, dtype):
    generator = torch.Generator().manual_seed(batch * 100 + queries)
    query = torch.randn(batch, kv_heads * groups, queries, 64, generator=generator).to(dtype)
    key = torch.randn(batch, kv_heads, slots, 64, generator=generator).to(dtype)
    value = torch.randn(batch, kv_heads, slots, 64, generator=generator).to(dtype)
    # a padded batch: row 0 starts late (left slots dead), every query causal over the last slots
    mask = torch.ones(batch, 1, queries, slots, dtype=torch.bool)
    for i in range(queries):
        mask[:, :, i, slots - queries + i + 1 :] = False
    mask[0, :, :, : slots // 3] = False
    out, weights = grouped_sdpa(_Module(groups), query, key, value, mask)
    assert weights is None
    assert out.shape == (batch, queries, kv_heads * groups, 64)
    tolerance = 1e-6 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(out, _repeated(query, key, value, mask, groups), rtol=0, atol=tolerance)


def test_declines_where_plain_sdpa_is_the_right_path():
    query, key = torch.zeros(1, 6, 3, 8), torch.zeros(1, 2, 5, 8)
    mask = torch.ones(1, 1, 3, 5, dtype=torch.bool)
    assert grouped_sdpa(_Module(1), torch.zeros(1, 2, 3, 8), key, key, mask) is None  # no grouping
    assert grouped_sdpa(_Module(3), query[:, :, :1], key, key, mask[:, :, :1]) is None  # one query
    assert grouped_sdpa(_Module(3), query, key, key, None) is None  # no mask: SDPA's enable_gqa/causal path
    assert grouped_sdpa(_Module(3), query, key, key, torch.ones(1, 6, 3, 5, dtype=torch.bool)) is None  # per-head mask
    assert grouped_sdpa(_Module(3), query, key, key, mask, softcap=30.0) is None


def test_model_outputs_equal_transformers_sdpa(tiny_engine, monkeypatch):
    """The tiny model (2 KV heads) through the registered "aisql" attention — a padded batch of
    prompts, then a 3-token step on its cache — gives the logits transformers' SDPA gives."""
    from aisql.engine.batch import flat

    calls = []
    monkeypatch.setattr(flat, "grouped_sdpa", lambda *a, **k: calls.append(a[1].shape) or grouped_sdpa(*a, **k))
    model = tiny_engine.runner.model
    cache = tiny_engine.runner.cache_kwarg
    assert model.config.num_key_value_heads < model.config.num_attention_heads
    ids = torch.tensor([[0, 0, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    step = torch.tensor([[20, 21, 22], [23, 24, 25]])
    outputs = {}
    for implementation in ("sdpa", "aisql"):
        model.set_attn_implementation(implementation)
        try:
            with torch.inference_mode():
                first = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
                full = torch.cat([mask, torch.ones(2, 3, dtype=torch.long)], dim=1)
                second = model(
                    input_ids=step, attention_mask=full, position_ids=positions[:, -1:] + torch.arange(1, 4), **{cache: first.past_key_values}
                )
            outputs[implementation] = (first.logits[mask.bool()], second.logits)
        finally:
            model.set_attn_implementation("aisql")
    assert len(calls) == 2 * model.config.num_hidden_layers  # both passes, every layer, through the grouped form
    for sdpa, aisql in zip(outputs["sdpa"], outputs["aisql"]):
        torch.testing.assert_close(aisql, sdpa, rtol=0, atol=1e-5)
        assert torch.equal(aisql.argmax(-1), sdpa.argmax(-1))
