"""Choosing a request's next token from the model's logits: greedy or seeded sampling with
temperature and top-p, optionally restricted to allowed token ids, with logprobs on request."""

from __future__ import annotations

import torch

from aisql.engine.decoding.token_sampling import sample_token
from aisql.engine.continuous.request import Running


def choose_token(sequence: Running, logits: torch.Tensor) -> tuple[int, float | None, dict[int, float] | None]:
    """(token, its logprob, top alternatives) — the logprobs are those of the full distribution."""
    request = sequence.request
    candidates = logits
    if request.allowed_token_ids is not None:
        candidates = torch.full_like(logits, float("-inf"))
        allowed = torch.tensor(request.allowed_token_ids, device=logits.device)
        candidates[allowed] = logits[allowed]
    token = sample_token(candidates, request.temperature, request.top_p, sequence.generator)
    if request.logprobs is None:
        return token, None, None
    logprob, top = token_logprobs(logits, token, request.logprobs)
    return token, logprob, top


def token_logprobs(logits: torch.Tensor, token: int, top: int) -> tuple[float, dict[int, float]]:
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    chosen = float(logprobs[token])
    if top <= 0:
        return chosen, {}
    values, ids = torch.topk(logprobs, min(top, logprobs.shape[-1]))
    return chosen, dict(zip(ids.tolist(), values.tolist()))
