"""One serving request's keys and values, every layer, in buffers sized once for the whole request.

The padded batch cache the serving loop used before grew by concatenation: every decode pass
copied every running request's whole KV (per layer, padded to the longest row), every request
joining or leaving copied the batch again. Here a request's KV lives in its own buffers from its
first prompt token to its last output token — capacity prompt + max_tokens, which the scheduler
already reserves — and a pass writes its new tokens in place. Rejected speculative tokens are
forgotten by moving `length` back (their slots are overwritten by the next pass). Attention reads
`[:, :length]` views: nothing is copied per pass, per join or per leave.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from aisql.engine.kv.radix import LayerKV, RadixNode


class SequenceKV:
    def __init__(self, layers: int, capacity: int) -> None:
        self.capacity = capacity
        self.keys: list[torch.Tensor | None] = [None] * layers  # [kv_heads, capacity, head_dim], made at first write
        self.values: list[torch.Tensor | None] = [None] * layers
        self.length = 0  # tokens whose KV is valid: positions [0, length)

    def _buffers(self, layer: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.keys[layer] is None:
            shape = (like.shape[0], self.capacity, like.shape[-1])
            self.keys[layer] = like.new_empty(shape)
            self.values[layer] = like.new_empty(shape)
        return self.keys[layer], self.values[layer]

    def write(self, layer: int, start: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Put positions [start, start + n) of one layer: keys/values [kv_heads, n, head_dim]."""
        end = start + keys.shape[1]
        if end > self.capacity:
            raise ValueError(f"KV of {end} tokens exceeds the request's reserved {self.capacity}")
        buffer_k, buffer_v = self._buffers(layer, keys)
        buffer_k[:, start:end] = keys
        buffer_v[:, start:end] = values

    def seed(self, pieces: Sequence[tuple[RadixNode, int]]) -> int:
        """Copy a cached prefix into positions [0, n), straight from the prefix tree's node pieces
        (one copy, no concatenated intermediate); returns n."""
        start = 0
        for node, count in pieces:
            for layer, (keys, values) in enumerate(node.kv):
                self.write(layer, start, keys[:, :count], values[:, :count])
            start += count
        self.length = start
        return start

    def view(self, layer: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of positions [0, end) of one layer, as they lie."""
        return self.keys[layer][:, :end], self.values[layer][:, :end]

    def kv_of(self, start: int, end: int) -> list[LayerKV]:
        """Cloned KV of positions [start, end), per layer: what the prefix tree stores."""
        return [(k[:, start:end].clone(), v[:, start:end].clone()) for k, v in zip(self.keys, self.values)]
