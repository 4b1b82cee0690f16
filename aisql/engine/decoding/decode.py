"""One decode step over a batch of running sequences: the step both `HFEngine.generate` and the
serving loop take.

Each row feeds its last token plus a draft (prompt-lookup speculation; empty when not
speculating) in one forward pass on the batch's KV cache. Greedy rows keep the longest prefix of
the draft that equals the model's own choices, plus the model's token after it — exactly plain
greedy decoding, fewer passes. The KV slots of rejected draft tokens are masked out, and the work
is counted once, here: tokens computed, FLOPs (rejected drafts included), padding, drafts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from aisql.engine.base import EngineStats
from aisql.engine.batch.model_runner import ModelRunner
from aisql.engine.decoding.speculative import accepted_length


@dataclass
class DecodeRow:
    feed: int  # the last chosen token, not yet run through the model
    position: int  # its position in the sequence
    draft: list[int] = field(default_factory=list)  # speculative tokens after it


@dataclass
class DecodeOutput:
    logits: torch.Tensor  # [rows, width, vocab]: position j predicts the token after draft[:j]
    mask: torch.Tensor  # the batch mask, extended by this step's slots
    width: int  # slots this step added per row


def decode_pass(runner: ModelRunner, cache, mask: torch.Tensor, rows: Sequence[DecodeRow]) -> DecodeOutput:
    """Run every row's feed token and draft through the model (appending to `cache`)."""
    device = runner.device
    width = 1 + max(len(row.draft) for row in rows)
    ids = torch.full((len(rows), width), runner.pad_id, dtype=torch.long, device=device)
    new_mask = torch.zeros((len(rows), width), dtype=torch.long, device=device)
    positions = torch.zeros((len(rows), width), dtype=torch.long, device=device)
    for index, row in enumerate(rows):
        fed = [row.feed] + row.draft
        ids[index, : len(fed)] = torch.tensor(fed, device=device)
        new_mask[index, : len(fed)] = 1
        positions[index] = torch.arange(row.position, row.position + width, device=device)
    mask = torch.cat([mask, new_mask], dim=1)
    hidden = runner.forward(ids, cache, attention_mask=mask, position_ids=positions)
    return DecodeOutput(runner.logits(hidden), mask, width)


def greedy_accept(draft: Sequence[int], logits: torch.Tensor) -> tuple[list[int], int]:
    """The tokens greedy decoding emits from one row's step: the accepted draft prefix plus the
    model's token after it; and how many draft tokens were accepted."""
    greedy = torch.argmax(logits[: len(draft) + 1], dim=-1).tolist()
    accepted = accepted_length(draft, greedy)
    return list(draft[:accepted]) + [greedy[accepted]], accepted


def settle(runner: ModelRunner, stats: EngineStats, out: DecodeOutput, rows: Sequence[DecodeRow], accepted: Sequence[int]) -> None:
    """After the rows chose their tokens: mask the slots of rejected drafts (their KV is of tokens
    not in the sequence), count the step's work, and advance each row's position."""
    slots = out.mask.shape[1]
    for index, (row, kept) in enumerate(zip(rows, accepted)):
        out.mask[index, slots - out.width + 1 + kept :] = 0
        runner.count(1 + kept, row.position)
        stats.flops += runner.profile.flops(len(row.draft) - kept, row.position + 1 + kept)
        stats.draft_tokens += len(row.draft)
        stats.draft_accepted_tokens += kept
        stats.padding_tokens += out.width - 1 - len(row.draft)
        row.position += 1 + kept
    stats.decode_passes += 1
