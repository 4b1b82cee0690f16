"""The prefix tree of token sequences, counted: how many tokens an engine with a prefix cache must
compute for them (each distinct prefix once). Explain counts a node's prompts this way when they
are few enough to tokenize (aisql.planner.cost); a trie shared across a plan's nodes counts a
prefix an earlier node computed as cached, as a fresh engine's cache would."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


class PrefixTrie:
    def __init__(self) -> None:
        self._root: dict[int, dict] = {}
        self.size = 0  # nodes: distinct non-empty prefixes inserted so far

    def insert(self, tokens: Sequence[int]) -> int:
        """Add one sequence; returns its tokens that no earlier sequence had computed."""
        return self._insert_from(self._root, tokens)[1]

    def insert_all(self, sequences: Iterable[Sequence[int]]) -> int:
        return sum(self.insert(s) for s in sequences)

    def insert_branches(self, prompt: Sequence[int], tails: Iterable[Sequence[int]]) -> int:
        """Add `prompt` + each tail (a scored prompt and its labels' tails): the prompt is walked
        once, not once per label — with 2,000 labels the per-tail walk was 2,000 walks of the
        whole prompt. Returns the tokens no earlier sequence had computed."""
        node, new = self._insert_from(self._root, prompt)
        return new + sum(self._insert_from(node, tail)[1] for tail in tails)

    def _insert_from(self, node: dict, tokens: Sequence[int]) -> tuple[dict, int]:
        new = 0
        for token in tokens:
            child = node.get(token)
            if child is None:
                child = node[token] = {}
                new += 1
            node = child
        self.size += new
        return node, new
