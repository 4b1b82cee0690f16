"""Forward passes over *rows*: a cached prefix (KV from the radix tree) plus new tokens.

A batch stacks rows that may have different prefixes. Each distinct prefix is gathered from the
tree once and copied into its rows; row i's prefix fills slots [0, P_i) of the batch cache, slots
[P_i, P_max) are padding (masked), the new tokens follow at [P_max, P_max + S_i), right-padded.
Positions are explicit (P_i + j), so RoPE and every other position-dependent part see the true
positions and a row's results do not depend on what it is batched with.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Sequence

import torch

from aisql.engine.base import EngineStats
from aisql.engine.model.profile import model_profile
from aisql.engine.kv.radix import LayerKV, RadixCache, RadixNode


@dataclass
class Row:
    prefix: RadixNode  # deepest node whose cached KV the row reads (the root for none)
    prefix_len: int  # how many tokens of that path to read (may stop inside the node)
    tokens: Sequence[int]  # new tokens to run


@dataclass
class BatchOutput:
    hidden: torch.Tensor  # [B, S_max, H] final hidden states of the new tokens
    cache: object | None  # the batch's DynamicCache (prefix slots + new tokens), if kept
    mask: torch.Tensor  # [B, P_max + S_max] 1 = real slot
    prefix_width: int  # P_max
    lengths: list[int]  # S_i
    prefix_lengths: list[int]  # P_i


class ModelRunner:
    def __init__(self, model, stats: EngineStats, pad_id: int) -> None:
        self.model = model
        self.stats = stats
        self.pad_id = pad_id
        self.decoder = model.get_decoder()
        self.lm_head = model.get_output_embeddings()
        self.device = next(model.parameters()).device
        params = inspect.signature(self.decoder.forward).parameters
        self.cache_kwarg = "cache" if "cache" in params else "past_key_values"
        config = model.config
        self._softcap = getattr(config, "final_logit_softcapping", None)
        self._logit_scale = getattr(config, "logit_scale", None)
        self._logits_scaling = getattr(config, "logits_scaling", None)
        self.bytes_per_token, self.supports_prefix_cache = self._probe_cache()
        self.profile = model_profile(model, getattr(config, "_name_or_path", "") or "model")

    # ---- facts -----------------------------------------------------------------------------
    def recompute_cost(self, start: int, end: int) -> float:
        """FLOPs to run tokens [start, end) given their prefix: weights + attention over the prefix."""
        return self.profile.flops(end - start, start)

    def count(self, tokens: int, start: int) -> None:
        """Account `tokens` real positions run at positions start.. (padding is not counted)."""
        self.stats.computed_tokens += tokens
        self.stats.flops += self.profile.flops(tokens, start)

    def _probe_cache(self) -> tuple[int, bool]:
        """Bytes of KV per token, and whether the cache is plain per-layer keys/values
        (sliding-window or recurrent layers cannot be cut into reusable prefixes)."""
        cache = self.new_cache()
        ids = torch.tensor([[self.pad_id, self.pad_id]], device=self.device)
        with torch.inference_mode():
            self.decoder(input_ids=ids, **{self.cache_kwarg: cache, "use_cache": True})
        layers = getattr(cache, "layers", None)
        if not layers or any(not hasattr(l, "keys") or getattr(l, "is_sliding", False) for l in layers):
            return 0, False
        per_token = sum((l.keys.numel() + l.values.numel()) * l.keys.element_size() for l in layers) // 2
        sliding = getattr(self.model.config, "sliding_window", None) and getattr(self.model.config, "use_sliding_window", True)
        return per_token, not sliding

    # ---- forward passes --------------------------------------------------------------------
    def run(self, rows: Sequence[Row], radix: RadixCache | None, keep_cache: bool) -> BatchOutput:
        prefix_lengths = [row.prefix_len for row in rows]
        lengths = [len(row.tokens) for row in rows]
        width = max(prefix_lengths)
        span = max(lengths)
        batch = len(rows)
        cache = self.new_cache() if (keep_cache or width) else None
        if width:
            self._fill_prefix(cache, rows, radix, width)
        ids = torch.full((batch, span), self.pad_id, dtype=torch.long, device=self.device)
        mask = torch.zeros((batch, width + span), dtype=torch.long, device=self.device)
        positions = torch.zeros((batch, span), dtype=torch.long, device=self.device)
        for b, row in enumerate(rows):
            ids[b, : lengths[b]] = torch.tensor(list(row.tokens), device=self.device)
            mask[b, : row.prefix_len] = 1
            mask[b, width : width + lengths[b]] = 1
            positions[b] = torch.arange(row.prefix_len, row.prefix_len + span, device=self.device)
        real = sum(lengths)
        for row, length in zip(rows, lengths):
            self.count(length, row.prefix_len)
        self.stats.padding_tokens += batch * span - real
        # With no prefix padding, right padding needs no mask (causal attention never looks ahead).
        needs_mask = width and any(p != width for p in prefix_lengths)
        hidden = self.forward(
            ids,
            cache,
            attention_mask=mask if needs_mask else None,
            position_ids=positions if width else None,
        )
        return BatchOutput(hidden, cache, mask, width, lengths, prefix_lengths)

    def _fill_prefix(self, cache, rows: Sequence[Row], radix: RadixCache, width: int) -> None:
        """Put each row's prefix KV into slots [0, P_i); each distinct prefix is gathered once.

        When every row reads the same prefix the batch cache starts as a broadcast view of it, so
        the forward pass's concatenation is its only copy; otherwise the distinct prefixes are
        stacked once and each row takes its own by a single gather."""
        distinct: dict[tuple[int, int], list[LayerKV]] = {}
        for row in rows:
            key = (id(row.prefix), row.prefix_len)
            if row.prefix_len and key not in distinct:
                distinct[key] = radix.gather(row.prefix, row.prefix_len)
        if len(distinct) == 1 and all(row.prefix_len == width for row in rows):
            (prefix,) = distinct.values()
            for layer, (k, v) in enumerate(prefix):
                self.seed_layer(
                    cache, layer, k.unsqueeze(0).expand(len(rows), -1, -1, -1), v.unsqueeze(0).expand(len(rows), -1, -1, -1)
                )
            return
        keys_order = list(distinct)
        which = torch.tensor(
            [keys_order.index((id(r.prefix), r.prefix_len)) + 1 if r.prefix_len else 0 for r in rows], device=self.device
        )
        for layer, (k0, v0) in enumerate(next(iter(distinct.values()))):
            shape = (len(keys_order) + 1, k0.shape[0], width, k0.shape[2])  # entry 0: no prefix
            keys, values = k0.new_zeros(shape), v0.new_zeros(shape)
            for i, key in enumerate(keys_order, start=1):
                k, v = distinct[key][layer]
                keys[i, :, : k.shape[1]] = k
                values[i, :, : v.shape[1]] = v
            self.seed_layer(cache, layer, keys[which], values[which])

    @staticmethod
    def seed_layer(cache, layer: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Start a layer of an empty cache with these tensors, without copying them (the first
        `update` would concatenate them onto an empty tensor)."""
        target = cache.layers[layer] if layer < len(getattr(cache, "layers", [])) else None
        if target is None or not hasattr(target, "lazy_initialization"):
            cache.update(keys, values, layer)
            return
        target.lazy_initialization(keys, values)
        target.keys, target.values = keys, values

    def forward(self, ids: torch.Tensor, cache, attention_mask=None, position_ids=None) -> torch.Tensor:
        kwargs = {self.cache_kwarg: cache, "use_cache": cache is not None}
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask
        if position_ids is not None:
            kwargs["position_ids"] = position_ids
        self.stats.forward_passes += 1
        return self.decoder(input_ids=ids, **kwargs).last_hidden_state

    def new_kv(self, out: BatchOutput, row: int, start: int, end: int) -> list[LayerKV]:
        """Cloned KV of row `row`'s new tokens [start, end) (relative to the row's new tokens)."""
        first = out.prefix_width + start
        last = out.prefix_width + end
        return [(layer.keys[row, :, first:last].clone(), layer.values[row, :, first:last].clone()) for layer in out.cache.layers]

    # ---- output head -----------------------------------------------------------------------
    def label_logits(self, hidden: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
        """Logits of only the given token rows of the output head: hidden [N, H], ids [N, K] -> [N, K]."""
        weights = self.lm_head.weight[token_ids]
        logits = torch.einsum("nkh,nh->nk", weights.float(), hidden.float())
        if getattr(self.lm_head, "bias", None) is not None:
            logits = logits + self.lm_head.bias[token_ids].float()
        return self.postprocess(logits)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.postprocess(self.lm_head(hidden).float())

    def postprocess(self, logits: torch.Tensor) -> torch.Tensor:
        """Model-specific logit transforms that HF applies after the output head."""
        if self._logit_scale is not None:
            logits = logits * self._logit_scale
        if self._logits_scaling is not None:
            logits = logits / self._logits_scaling
        if self._softcap is not None:
            logits = torch.tanh(logits / self._softcap) * self._softcap
        return logits

    # ---- caches ----------------------------------------------------------------------------
    def new_cache(self):
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def select_cache(self, cache, rows: torch.Tensor):
        """A new cache holding `rows` of `cache` (rows may repeat); `cache` is left intact."""
        selected = self.new_cache()
        for layer_index, layer in enumerate(cache.layers):
            selected.update(layer.keys[rows], layer.values[rows], layer_index)
        return selected
