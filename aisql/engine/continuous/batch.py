"""The running batch's KV: one cache whose rows are the running requests, and the surgery on it
(rows joining with their own KV, rows leaving, dead slots compacted away).

Rows join with KV of different lengths: each row's slots are right-padded to the batch's slot
count and masked, and positions are explicit, so every row computes exactly what it would alone.
"""

from __future__ import annotations

import torch

from aisql.engine.batch.model_runner import ModelRunner
from aisql.engine.kv.radix import LayerKV
from aisql.engine.continuous.request import Running


class RunningBatch:
    def __init__(self, runner: ModelRunner) -> None:
        self.runner = runner
        self.rows: list[Running] = []
        self.cache = None  # per layer: keys/values [rows, kv_heads, slots, head_dim]
        self.mask: torch.Tensor | None = None  # [rows, slots], 1 = real slot

    def __len__(self) -> int:
        return len(self.rows)

    def join(self, sequences: list[Running], cache, mask: torch.Tensor) -> None:
        """Append prefilled requests as new rows (`mask`: their real slots)."""
        if not sequences:
            return
        if self.cache is None:
            self.cache, self.mask, self.rows = cache, mask, list(sequences)
            return
        slots = max(self.mask.shape[1], mask.shape[1])
        merged = self.runner.new_cache()
        for index, (old, new) in enumerate(zip(self.cache.layers, cache.layers)):
            keys = torch.cat([_pad_slots(old.keys, slots), _pad_slots(new.keys, slots)], dim=0)
            values = torch.cat([_pad_slots(old.values, slots), _pad_slots(new.values, slots)], dim=0)
            self.runner.seed_layer(merged, index, keys, values)
        self.mask = torch.cat([_pad_slots(self.mask, slots), _pad_slots(mask, slots)], dim=0)
        self.cache = merged
        self.rows.extend(sequences)

    def keep(self, keep: list[int]) -> None:
        """Keep only these rows (the others finished or were cancelled: their KV is freed)."""
        if not keep:
            self.rows, self.cache, self.mask = [], None, None
            return
        if len(keep) == len(self.rows):
            return
        index = torch.tensor(keep, device=self.runner.device)
        self.cache.batch_select_indices(index)
        self.mask = self.mask[index]
        self.rows = [self.rows[i] for i in keep]
        live = self.mask.any(dim=0)
        if int(live.sum()) < self.mask.shape[1] // 2:  # mostly dead slots (a long row left): compact
            columns = live.nonzero().squeeze(1)
            for layer in self.cache.layers:
                layer.keys, layer.values = layer.keys[:, :, columns], layer.values[:, :, columns]
            self.mask = self.mask[:, columns]

    def row_kv(self, row: int, count: int):
        """KV of a row's first `count` real tokens, for the prefix cache: `(start, end) -> KV`."""
        slots = self.mask[row].nonzero().squeeze(1)[:count]
        cache = self.cache

        def kv(start: int, end: int) -> list[LayerKV]:
            picked = slots[start:end]
            return [(layer.keys[row, :, picked].clone(), layer.values[row, :, picked].clone()) for layer in cache.layers]

        return kv


def _pad_slots(tensor: torch.Tensor, slots: int) -> torch.Tensor:
    """Right-pad the slot dimension (dim 2 of KV [rows, heads, slots, dim], dim 1 of a mask) with zeros."""
    dim = 2 if tensor.dim() == 4 else 1
    missing = slots - tensor.shape[dim]
    if missing <= 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([tensor, tensor.new_zeros(shape)], dim=dim)
