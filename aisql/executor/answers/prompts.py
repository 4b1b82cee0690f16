"""Prompt sets: argument tuples -> rendered prompt texts, deduplicated, with their row counts.

DuckDB already groups identical argument tuples; different tuples may still render the same
text (e.g. 'a b' + 'c' and 'a' + 'b c'), so dedup happens again on the text, which is what the
model sees.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from aisql.sql.template import Template


@dataclass
class PromptSet:
    template: Template
    rows_in: int = 0  # NULL tuples included
    counts: dict[str, int] = field(default_factory=dict)  # text -> input rows rendering to it
    text_of: dict[tuple, str] = field(default_factory=dict)  # argument tuple -> text

    @classmethod
    def from_rows(cls, template: Template, rows: Iterable[tuple[tuple, int]]) -> "PromptSet":
        prompts = cls(template)
        for values, count in rows:
            prompts.add(values, count)
        return prompts

    def add(self, values: tuple, count: int = 1) -> None:
        self.rows_in += count
        if any(v is None for v in values):
            return  # NULL in, NULL out: never reaches the model
        text = self.text_of.get(values)
        if text is None:
            text = self.template.render(values)
            self.text_of[values] = text
        self.counts[text] = self.counts.get(text, 0) + count

    def subset(self, texts) -> "PromptSet":
        """The prompts among `texts`, with the tuples and rows that render to them."""
        wanted = set(texts)
        part = PromptSet(self.template)
        part.counts = {text: self.counts[text] for text in texts}
        part.text_of = {values: text for values, text in self.text_of.items() if text in wanted}
        part.rows_in = sum(part.counts.values())
        return part
