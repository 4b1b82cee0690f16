"""Prompt-lookup (n-gram) speculative decoding: drafts copied from the context, verified at once.

When a model copies from its input (extract a field, quote a passage), the tokens it is about to
produce already appear in the context right after the n-gram it just produced. We propose those
tokens as a draft, run the last token plus the draft through the model in one forward pass, and
keep the longest prefix of the draft that equals the model's own greedy choices, plus the model's
token after it. Every token kept is the model's greedy choice, so the output is exactly plain
greedy decoding; only the number of sequential forward passes drops.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence


@dataclass(frozen=True)
class SpeculationConfig:
    max_ngram: int = 4  # try to match the last 4, 3, ... tokens
    min_ngram: int = 2  # single-token matches propose too many wrong drafts
    max_draft: int = 8  # tokens proposed per step (adapts down after rejections)


@dataclass
class NgramIndex:
    """Where each n-gram of a token history last started, kept up to date as tokens are appended."""

    config: SpeculationConfig
    tokens: list[int] = field(default_factory=list)
    _last: dict[tuple[int, ...], int] = field(default_factory=dict)
    _draft_len: int = 0

    def __post_init__(self) -> None:
        self._draft_len = self.config.max_draft
        initial, self.tokens = self.tokens, []
        self.extend(initial)

    def extend(self, new_tokens: Sequence[int]) -> None:
        for token in new_tokens:
            self.tokens.append(token)
            end = len(self.tokens)
            # Index the n-grams that end just before the newest token: their continuation is known.
            for n in range(self.config.min_ngram, self.config.max_ngram + 1):
                start = end - 1 - n
                if start >= 0:
                    self._last[tuple(self.tokens[start : end - 1])] = start

    def propose(self, limit: int) -> list[int]:
        """Draft continuation of the history (at most `limit` tokens), or [] if nothing matches."""
        size = min(limit, self._draft_len)
        if size <= 0:
            return []
        for n in range(self.config.max_ngram, self.config.min_ngram - 1, -1):
            if len(self.tokens) <= n:
                continue
            start = self._last.get(tuple(self.tokens[-n:]))
            if start is not None:
                follow = self.tokens[start + n : start + n + size]
                if follow:
                    return follow
        return []

    def feedback(self, proposed: int, accepted: int) -> None:
        """Draft longer after full acceptance, shorter after a rejection."""
        if proposed == 0:
            return
        if accepted == proposed:
            self._draft_len = min(self.config.max_draft, max(1, self._draft_len) * 2)
        else:
            self._draft_len = max(1, accepted + 1)


def accepted_length(draft: Sequence[int], greedy: Sequence[int]) -> int:
    """How many leading draft tokens equal the model's greedy choices at their positions.

    greedy[j] is the model's choice after the last accepted token and draft[:j].
    """
    n = 0
    while n < len(draft) and draft[n] == greedy[n]:
        n += 1
    return n
