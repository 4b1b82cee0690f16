"""Drawing a token from logits: greedy, or seeded sampling with temperature and top-p — the one
rule batch generation (AI.GENERATE with a temperature) and the serving loop share."""

from __future__ import annotations

import torch


def sample_token(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None) -> int:
    """Greedy at temperature 0, else a draw from softmax(logits / temperature) cut to the top-p
    mass, from `generator` (seeded: the same draws every time). Shared by the serving loop and
    batch generation (AI.GENERATE with a temperature)."""
    if temperature == 0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        outside = torch.cumsum(sorted_probs, dim=-1) - sorted_probs > top_p
        sorted_probs[outside] = 0
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return int(torch.multinomial(probs, 1, generator=generator))  # same device as probs


def seeded_generator(seed: int | None, device: torch.device) -> torch.Generator | None:
    if seed is None:
        return None
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator
