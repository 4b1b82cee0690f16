"""Scoring a batch on the built-in engine: each request's labels scored after its prompt in one
forward pass — only the label rows of the output head multiplied for the first label token; a
multi-token label's later tokens as segments continuing the prompt (flattened pass) or from the
batch's cache (padded pass).
"""

from __future__ import annotations

from typing import Protocol, Sequence

import torch

from aisql.engine.base import EngineStats, LabelScores, ScoreRequest
from aisql.engine.batch.flat import FlatOutput, Segment
from aisql.engine.batch.model_runner import BatchOutput, ModelRunner
from aisql.engine.batch.scheduler import Scheduler, Work


class BatchEngine(Protocol):
    """What a batch pass needs of the engine (aisql.engine.backends.hf.HFEngine)."""

    runner: ModelRunner
    scheduler: Scheduler
    stats: EngineStats
    flat: bool
    device: torch.device

    def run_rows(self, batch: list[Work], keep_cache: bool, store: bool, requests: bool = True) -> BatchOutput: ...
    def run_segments(self, batch: list[Work], segments: list[Segment], store: bool, requests: bool = True) -> FlatOutput: ...


def score_batch(engine: "BatchEngine", batch: list[Work], requests: list[ScoreRequest], reuse: bool) -> list[LabelScores]:
    """Label log-likelihoods of one batch of requests: a flattened pass where the model's
    attention allows it, else a padded pass (multi-token labels continue from its cache)."""
    if engine.flat:
        return _score_flat(engine, batch, requests, reuse)
    needs_tail = any(len(label) > 1 for r in requests for label in r.label_ids)
    out = engine.run_rows(batch, keep_cache=needs_tail or reuse, store=reuse)
    rows = torch.arange(len(batch), device=engine.device)
    last = out.hidden[rows, torch.tensor(out.lengths, device=engine.device) - 1]

    # First label token: only those rows of the output head. The softmax normaliser at this
    # position is the same for every label of a request, so it cancels.
    first = _first_label_tokens(requests, engine.device)
    first_logits = engine.runner.label_logits(last, first)
    tails = _score_tails(engine, requests, out) if needs_tail else {}
    return _label_scores(requests, first_logits, tails, last)

def _score_flat(engine: "BatchEngine", batch: list[Work], requests: list[ScoreRequest], reuse: bool) -> list[LabelScores]:
    """One flattened pass: every request's tokens, and the tails of its multi-token labels as
    segments continuing it (so full-likelihood labels cost no second pass)."""
    segments = [Segment(w.row.prefix, w.row.prefix_len, w.row.tokens, w.row.prefix_len) for w in batch]
    tails: list[tuple[int, int, int]] = []  # (request, label, segment)
    for b, (work, request) in enumerate(zip(batch, requests)):
        for k, label in enumerate(request.label_ids):
            if len(label) > 1:
                tails.append((b, k, len(segments)))
                segments.append(Segment(work.row.prefix, work.row.prefix_len, label[:-1], work.row.prefix_len + len(work.row.tokens), parent=b))
    out = engine.run_segments(batch, segments, store=reuse)
    lasts = torch.tensor([out.last(b, len(w.row.tokens)) for b, w in enumerate(batch)], device=engine.device)
    first = _first_label_tokens(requests, engine.device)
    last = out.hidden[lasts]
    first_logits = engine.runner.label_logits(last, first)
    tail_scores: dict[tuple[int, int], float] = {}
    if tails:
        positions = [out.offsets[s] + j for _, _, s in tails for j in range(len(segments[s].tokens))]
        logprobs = torch.log_softmax(engine.runner.logits(out.hidden[torch.tensor(positions, device=engine.device)]), dim=-1)
        row = 0
        for b, k, s in tails:
            targets = requests[b].label_ids[k][1:]
            steps = torch.arange(row, row + len(targets), device=engine.device)
            tail_scores[(b, k)] = float(logprobs[steps, torch.tensor(targets, device=engine.device)].double().sum())
            row += len(targets)
    return _label_scores(requests, first_logits, tail_scores, last)

def _score_tails(engine: "BatchEngine", requests: list[ScoreRequest], out: BatchOutput) -> dict[tuple[int, int], float]:
    """log P(label[1:] | prompt, label[0]) for labels longer than one token, from the batch cache."""
    rows = [(b, k, label) for b, r in enumerate(requests) for k, label in enumerate(r.label_ids) if len(label) > 1]
    slots = out.mask.shape[1]
    tails: dict[tuple[int, int], float] = {}
    for chunk in _chunks(rows, max(1, engine.scheduler.max_cache_tokens // (slots + 8))):
        sources = torch.tensor([b for b, _, _ in chunk], device=engine.device)
        cache = engine.runner.select_cache(out.cache, sources)
        width = max(len(label) - 1 for _, _, label in chunk)
        ids = torch.full((len(chunk), width), engine.runner.pad_id, dtype=torch.long, device=engine.device)
        mask = torch.cat([out.mask[sources], torch.zeros((len(chunk), width), dtype=torch.long, device=engine.device)], 1)
        positions = torch.zeros((len(chunk), width), dtype=torch.long, device=engine.device)
        for r, (b, _, label) in enumerate(chunk):
            ids[r, : len(label) - 1] = torch.tensor(label[:-1], device=engine.device)
            mask[r, slots : slots + len(label) - 1] = 1
            start = out.prefix_lengths[b] + out.lengths[b]
            positions[r] = torch.arange(start, start + width, device=engine.device)
        hidden = engine.runner.forward(ids, cache, attention_mask=mask, position_ids=positions)
        real = sum(len(label) - 1 for _, _, label in chunk)
        for b, _, label in chunk:
            engine.runner.count(len(label) - 1, out.prefix_lengths[b] + out.lengths[b])
        engine.stats.padding_tokens += len(chunk) * width - real
        logprobs = torch.log_softmax(engine.runner.logits(hidden), dim=-1)
        for r, (b, k, label) in enumerate(chunk):
            targets = torch.tensor(label[1:], device=engine.device)
            steps = torch.arange(len(label) - 1, device=engine.device)
            tails[(b, k)] = float(logprobs[r, steps, targets].double().sum())
    return tails


def _first_label_tokens(requests: Sequence[ScoreRequest], device) -> torch.Tensor:
    """Each request's labels' first tokens, one row per request (padded with 0): the only rows of
    the output head a pass multiplies for them."""
    width = max(len(r.label_ids) for r in requests)
    first = torch.zeros((len(requests), width), dtype=torch.long, device=device)
    for b, r in enumerate(requests):
        first[b, : len(r.label_ids)] = torch.tensor([label[0] for label in r.label_ids], device=device)
    return first


def _chunks(items: list, size: int):
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _label_scores(
    requests: Sequence[ScoreRequest], first_logits: torch.Tensor, tails: dict[tuple[int, int], float], last: torch.Tensor
) -> list[LabelScores]:
    """Each request's label log-likelihoods normalised over its labels: the first token's logit
    plus the log-probability of the label's later tokens (`tails[(request, label)]`, 0 for a
    one-token label), log-softmaxed in float64 — one rule for the padded and flattened passes.
    `last`: the final hidden states the first logits were read from, returned (float32) to the
    requests that keep them."""
    states = last.float().cpu().numpy() if any(r.keep_state for r in requests) else None
    scores = []
    for b, r in enumerate(requests):
        values = first_logits[b, : len(r.label_ids)].double().clone()
        for k in range(len(r.label_ids)):
            values[k] += tails.get((b, k), 0.0)
        state = states[b].copy() if r.keep_state else None
        scores.append(LabelScores(tuple(torch.log_softmax(values, dim=0).tolist()), state))
    return scores
