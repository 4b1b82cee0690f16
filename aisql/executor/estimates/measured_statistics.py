"""The planner's statistics at run and explain time: DuckDB counts, the model's tokenizer, samples.

Counts come from each node's estimate query (its input with no AI answer known). Token counts come
from the model's own tokenizer on a deterministic sample of the node's prompts. Selectivity comes
from the node's hint, else — when a sampler is given — from running the predicate on a sample of
its input (the answers go to the answer store, so the run reuses them), else a default.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable

import duckdb

from aisql.engine.base import ModelFacts
from aisql.executor.estimates.input_counts import InputCounts
from aisql.executor.estimates.token_measures import TokenMeasures
from aisql.planner.plan import AINode
from aisql.planner.statistics import DEFAULT_SELECTIVITY, GroupsProfile, InputProfile, Selectivity, TextsProfile, TokenProfile

SELECTIVITY_SAMPLE = 32

# (node, sampled argument tuples) -> the node's SQL value per tuple, or None if it may not sample
Sampler = Callable[[AINode, list[tuple]], list | None]


class MeasuredStatistics:
    """The planner's statistics protocol (aisql.planner.statistics) answered from DuckDB's counts
    (InputCounts), the model's tokenizer (TokenMeasures) and, for selectivity, samples."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        facts: Callable[[], ModelFacts] | None,
        sampler: Sampler | None = None,
        sample_size: int = SELECTIVITY_SAMPLE,
        min_sampling_ratio: float = 4.0,
        embedding_model: Callable[[], object] | None = None,
    ) -> None:
        """`facts` gives the model's tokenizer and shape when first needed (None: counts only)."""
        self.con = con
        self._facts_provider = facts
        self._facts: ModelFacts | None = None
        self.sampler = sampler
        self.sample_size = sample_size
        # Sample only inputs at least this many times the sample: a sample is then at most a
        # 1/ratio share of the predicate's own work (smaller inputs keep the default order).
        self.min_sampling_ratio = min_sampling_ratio
        self.counts = InputCounts(con, lambda: self.facts, embedding_model)
        self.tokens = TokenMeasures(self.counts, lambda: self.facts)
        self._selectivity: dict[str, Selectivity] = {}

    @property
    def facts(self) -> ModelFacts | None:
        if self._facts is None and self._facts_provider is not None:
            self._facts = self._facts_provider()
        return self._facts

    @property
    def model(self):
        return self.facts.profile if self.facts else None

    # ---- counts and tokens (aisql.executor.estimates.input_counts, .token_measures) ----------
    def why_unknown(self, node: AINode) -> str | None:
        """Why input_profile(node) is None, when it is for a reason other than AI answers."""
        return self.counts.why_unknown(node)

    def input_profile(self, node: AINode) -> InputProfile | None:
        return self.counts.input_profile(node)

    def leading_group_sizes(self, node: AINode) -> list[int] | None:
        return self.counts.leading_group_sizes(node)

    def groups_profile(self, node: AINode) -> GroupsProfile | None:
        return self.counts.groups_profile(node)

    def texts_profile(self, node: AINode) -> TextsProfile | None:
        return self.counts.texts_profile(node)

    def distinct(self, node: AINode, tables: frozenset[str]) -> int | None:
        return self.counts.distinct(node, tables)

    def sample(self, node: AINode, size: int) -> list[tuple[tuple, int]] | None:
        return self.counts.sample(node, size)

    def token_profile(self, node: AINode) -> TokenProfile | None:
        return self.tokens.token_profile(node)

    def token_sequences(self, node: AINode) -> list[tuple[tuple[int, ...], list[tuple[int, ...]]]] | None:
        return self.tokens.token_sequences(node)

    # ---- selectivity --------------------------------------------------------------------------
    @contextmanager
    def sampling_paused(self):
        """Plan without running the model (defaults for unhinted selectivities), e.g. to check a
        budget before any model work; what was assumed meanwhile is forgotten afterwards."""
        sampler, known = self.sampler, set(self._selectivity)
        self.sampler = None
        try:
            yield self
        finally:
            self.sampler = sampler
            for node_id in set(self._selectivity) - known:
                del self._selectivity[node_id]

    def selectivity(self, node: AINode) -> Selectivity:
        if node.id not in self._selectivity:
            self._selectivity[node.id] = self._selectivity_of(node)
        return self._selectivity[node.id]

    def _selectivity_of(self, node: AINode) -> Selectivity:
        hint = node.call.hints.get("selectivity")
        if hint is not None:
            return Selectivity(float(hint), "hint")
        profile = self.input_profile(node)
        large_enough = profile is not None and profile.unique >= self.min_sampling_ratio * self.sample_size
        if self.sampler is not None and node.call.function.is_predicate and large_enough:
            sample = self.sample(node, self.sample_size)
            if sample:
                answers = self.sampler(node, [values for values, _ in sample])
                if answers is None:
                    return Selectivity(DEFAULT_SELECTIVITY, "default")
                rows = sum(count for _, count in sample)
                true_rows = sum(count for (_, count), answer in zip(sample, answers) if answer)
                return Selectivity(true_rows / rows if rows else DEFAULT_SELECTIVITY, "sample", len(sample))
        return Selectivity(DEFAULT_SELECTIVITY, "default")


