"""What the planner needs to know about data, prompts and the model — asked, never computed here.

The planner stays free of DuckDB and of models: it asks a `Statistics` object. The executor
provides one backed by DuckDB (counts), the model's tokenizer (token counts on a sample) and,
when allowed, the engine (selectivity measured on a sample). Planner tests pass a test double.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from aisql.engine.base import ModelProfile
from aisql.planner.plan import AINode

DEFAULT_SELECTIVITY = 0.5


@dataclass(frozen=True)
class InputProfile:
    """Counts over a node's input with no AI answer known (its estimate query)."""

    rows_in: int
    prompts_total: int  # rows whose arguments are all non-NULL
    prefix_distinct: tuple[int, ...]  # distinct (a0), (a0, a1), ..., (a0..ak): the last = distinct tuples
    tables: frozenset[str] = frozenset()  # source aliases the prompt's arguments read
    distinct_estimated: bool = False  # prefix_distinct from a HyperLogLog sketch (inputs too big to count exactly)

    @property
    def unique(self) -> int:
        return self.prefix_distinct[-1] if self.prefix_distinct else 0


@dataclass(frozen=True)
class TokenProfile:
    """Average token counts of a node's prompts, measured with the model's tokenizer on a sample."""

    shared: float  # instruction, chat framing and the template's static prefix: same in every prompt
    segments: tuple[float, ...]  # tokens added by each argument value and the literal text after it
    tail: float  # tokens after the user text (e.g. the assistant header)
    first_literal: float = 0.0  # tokens of the literal text right after the first argument
    # Prefix sharing among first-argument values (common openings): their segment's prefix tree
    # over `leading_sampled` distinct values had `leading_tree` nodes, and grew by
    # `leading_marginal` tokens per value over the second half of the sample.
    leading_sampled: int = 0
    leading_tree: float = 0.0
    leading_marginal: float = 0.0
    label_tails: int = 0  # scoring: sum over labels of (tokens - 1), run once per distinct prompt
    output_tokens: float = 0.0  # generation: tokens decoded per prompt (max_tokens: an upper bound)
    sampled: int = 0  # prompts tokenized

    @property
    def prompt_tokens(self) -> float:
        return self.shared + sum(self.segments) + self.tail

    def leading_tokens(self, distinct: float) -> float:
        """Tokens of the first segment's prefix tree over `distinct` first values."""
        if not self.leading_sampled or not self.segments:
            return distinct * (self.segments[0] if self.segments else 0.0)
        if distinct <= self.leading_sampled:
            return self.leading_tree * distinct / self.leading_sampled
        return self.leading_tree + (distinct - self.leading_sampled) * self.leading_marginal


@dataclass(frozen=True)
class TextsProfile:
    """The texts an embedding node (AI.EMBED, AI.SIMILARITY) embeds: every row's contents
    (`total`, what naive execution embeds) and the distinct ones (what a planned run embeds)."""

    total: int
    unique: int
    tokens_per_text: float  # the embedding model's tokenizer, on a sample


@dataclass(frozen=True)
class GroupsProfile:
    """The groups an AI aggregate reduces: their sizes in the model's tokens (estimated)."""

    tokens: tuple[float, ...]  # per distinct group: its values' tokens, item numbering included


@dataclass(frozen=True)
class Selectivity:
    value: float  # fraction of input rows for which an AI predicate is TRUE
    source: str  # "hint" | "sample" | "default"
    sampled: int = 0


class Statistics(Protocol):
    model: ModelProfile | None

    def input_profile(self, node: AINode) -> InputProfile | None:
        """Counts of the node's input, or None if they cannot be known without running AI calls."""

    def token_profile(self, node: AINode) -> TokenProfile | None:
        ...

    def selectivity(self, node: AINode) -> Selectivity:
        """From the node's hint, else measured on a sample if allowed, else DEFAULT_SELECTIVITY."""

    def groups_profile(self, node: AINode) -> GroupsProfile | None:
        """Token sizes of an aggregate node's groups, or None if they cannot be counted."""

    def texts_profile(self, node: AINode) -> TextsProfile | None:
        """The texts an embedding node embeds, or None if they cannot be counted."""

    def distinct(self, node: AINode, tables: frozenset[str]) -> int | None:
        """Distinct values of the node's arguments that read only `tables` (for join fan-out)."""

    # Optional (a statistics object without it is asked nothing): every distinct prompt of the
    # node's AI-free input as the token sequences the engine runs — the prompt, or the prompt and
    # each label's tail when scoring —, when few enough to tokenize in about a second; else None.
    # The cost model then counts their prefix tree exactly instead of estimating it.
    # def token_sequences(self, node: AINode) -> list[tuple[int, ...]] | None
