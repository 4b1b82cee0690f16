"""An AI node's prompts in the model's tokens, for the planner: a profile from a deterministic
sample (shared prefix, per-argument segments, tail, the first argument's prefix-tree growth) and,
where tokenizing them all is quick on this machine, every distinct prompt's exact token ids.
"""

from __future__ import annotations

import time
from typing import Callable

from aisql.engine.base import ModelFacts
from aisql.engine.model.prompt_format import encode_labels
from aisql.executor.answers.request_kinds import kind_of
from aisql.executor.estimates.input_counts import TOKEN_SAMPLE, InputCounts
from aisql.planner.plan import AINode
from aisql.planner.statistics import TokenProfile

EXACT_SECONDS = 1.0  # explain tokenizes a node's every distinct prompt when that takes about this long or less
TIMING_PROMPTS = 64  # prompts tokenized to measure how long the rest would take


class TokenMeasures:
    """Each node's token profile and exact sequences, each measured once."""

    def __init__(self, counts: InputCounts, facts: Callable[[], ModelFacts | None]) -> None:
        self.counts = counts
        self._facts = facts
        self._tokens: dict[str, TokenProfile | None] = {}
        self._sequences: dict[str, list[tuple[int, ...]] | None] = {}

    @property
    def facts(self) -> ModelFacts | None:
        return self._facts()

    def token_profile(self, node: AINode) -> TokenProfile | None:
        if node.id not in self._tokens:
            self._tokens[node.id] = self._measure_tokens(node)
        return self._tokens[node.id]

    def _measure_tokens(self, node: AINode) -> TokenProfile | None:
        sample = self.counts.sample(node, TOKEN_SAMPLE)
        if sample is None or self.facts is None:
            return None
        fmt = self.facts.format
        task = node.call.task
        before, after = fmt.frame(task.framing)
        template = node.call.template
        shared = fmt.count_tokens([before + template.parts[0]])[0]
        arity = node.call.arity
        segments = [0.0] * arity
        tails = []
        texts_per_row = []
        for values, _ in sample or []:
            prefixes = []
            text = template.parts[0]
            for slot, part in zip(template.slots, template.parts[1:]):
                text += values[slot] + part
                prefixes.append(text)
            texts_per_row.append([before + p for p in prefixes] + [before + text + after])
        # one tokenizer call for the whole sample (a call per row cost ~10% of a small query's time)
        every = fmt.count_tokens([text for texts in texts_per_row for text in texts]) if texts_per_row else []
        starts = [0]
        for texts in texts_per_row:
            starts.append(starts[-1] + len(texts))
        for row in range(len(texts_per_row)):
            counts = every[starts[row] : starts[row + 1]]
            previous, deepest = shared, -1
            # Arguments are numbered in order of first appearance: a gap belongs to the segment of
            # the deepest argument seen so far (a value used again adds to that segment).
            for slot, count in zip(template.slots, counts[:-1]):
                deepest = max(deepest, slot)
                segments[deepest] += count - previous
                previous = count
            tails.append(counts[-1] - previous)
        n = max(1, len(sample or []))
        label_tails = sum(len(label) - 1 for label in encode_labels(self.facts.encode_label, fmt.end_of_answer, task.labels, task.framing))
        output = node.call.function.output_tokens(node.call.options)
        first_literal = float(fmt.count_tokens([template.parts[1]])[0]) if len(template.parts) > 1 and template.parts[1] else 0.0
        leading = self._leading_growth(fmt, before, template, sample, shared)
        return TokenProfile(
            shared=float(shared),
            segments=tuple(s / n for s in segments),
            first_literal=first_literal,
            leading_sampled=leading[0],
            leading_tree=leading[1],
            leading_marginal=leading[2],
            tail=sum(tails) / n if tails else float(fmt.count_tokens([before + after])[0] - shared),
            label_tails=label_tails,
            output_tokens=output,
            sampled=len(sample or []),
        )

    def token_sequences(self, node: AINode) -> list[tuple[tuple[int, ...], list[tuple[int, ...]]]] | None:
        """Every distinct prompt of the node's AI-free input as the sequences the engine runs:
        (prompt, the label tails scored after it — [()] when nothing is scored), when tokenizing them all takes
        about EXACT_SECONDS or less — measured on the first TIMING_PROMPTS with this model's
        tokenizer, on this machine; else None (the cost model then estimates from a sample).
        DuckDB counts the distinct prompts first: nothing is rendered for a node too big."""
        if node.id not in self._sequences:
            self._sequences[node.id] = self._exact_sequences(node)
        return self._sequences[node.id]

    def _exact_sequences(self, node: AINode) -> list[tuple[int, ...]] | None:
        profile = self.counts.input_profile(node)
        if profile is None or self.facts is None or not profile.unique or self.token_profile(node) is None:
            return None
        head = self.counts.sample(node, min(int(profile.unique), TIMING_PROMPTS))
        if not head:
            return None
        task = node.call.task
        fmt = self.facts.format
        started = time.perf_counter()
        ids = fmt.encode_prompts(task.framing, [node.call.template.render(values) for values, _ in head])
        per_prompt = (time.perf_counter() - started) / len(head)
        if profile.unique * per_prompt > EXACT_SECONDS:
            return None
        if profile.unique > len(head):
            rows = self.counts.sample(node, int(profile.unique))  # the same order: its first rows are `head`
            if rows is None:
                return None
            rest = rows[len(head) :]
            ids = ids + fmt.encode_prompts(task.framing, [node.call.template.render(values) for values, _ in rest])
        tails = [label[:-1] for label in encode_labels(self.facts.encode_label, fmt.end_of_answer, task.labels, task.framing)] if kind_of(task).labels else []
        tails = list(dict.fromkeys(tails)) or [()]
        return [(tuple(prompt), tails) for prompt in ids]

    @staticmethod
    def _leading_growth(fmt, before: str, template, sample, shared: int) -> tuple[int, float, float]:
        """Prefix-tree size of the first segment over the sample's distinct first values, and how
        much it grew per value over the second half (the cost of one more value, extrapolated)."""
        first_slot = template.slots[0] if template.slots else None
        if first_slot is None:
            return 0, 0.0, 0.0
        after_first = template.parts[1] if len(template.parts) > 1 else ""
        values = list(dict.fromkeys(values[first_slot] for values, _ in sample))
        if len(values) < 4:
            return 0, 0.0, 0.0
        ids = fmt.tokenizer([before + template.parts[0] + v + after_first for v in values], add_special_tokens=False)["input_ids"]
        nodes: set[tuple[int, ...]] = set()
        half_size = 0.0
        for i, seq in enumerate(ids):
            nodes.update(tuple(seq[:j]) for j in range(shared + 1, len(seq) + 1))
            if i + 1 == len(values) // 2:
                half_size = float(len(nodes))
        full = float(len(nodes))
        marginal = (full - half_size) / (len(values) - len(values) // 2)
        return len(values), full, marginal

