"""Prompts in a model's own format: its chat template when it has one, a plain framing otherwise.

Every prompt of an AI call is (fixed framing, varying text). A `Framing` says what surrounds the
text: a system message (None: the model's own default), a suffix after the text in the user's
turn, and the beginning of the model's answer (prefilled, so that the next token is the answer
to score: "The answer is:" -> " Yes" / " No"). Everything before the text is shared by all
prompts of a call, so its KV is computed once. A chat template is rendered once per framing
with a sentinel and split around it (checked to reproduce the template verbatim), instead of
once per prompt.

Data never becomes prompt structure: only the chat template's own markup may produce special
tokens. A text, a label, a question or a task (the call's system message) that spells a special
token (`<|im_end|>`, `<|endoftext|>`, ...) is encoded piece by piece — the template's markup with
special tokens, every user- or data-supplied string with special-token parsing off — so the
model reads those characters as characters. Prompts without such strings are encoded in one go,
as before (the same token ids).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Union

from aisql.errors import ModelError

_SENTINEL = "\u0000AISQL_TEXT\u0000"


@dataclass(frozen=True)
class Framing:
    system: str | None = None  # the system message; None: the model's own default (its template's)
    suffix: str = ""  # after the text, in the user's turn
    answer_prefix: str = ""  # the start of the model's answer, prefilled
    label_prefix: str = ""  # before each scored label, e.g. " " after an answer prefix ending in ":"

    @staticmethod
    def of(framing: "FramingLike") -> "Framing":
        """A Framing, or a plain system message (the framing of earlier aisql versions)."""
        return framing if isinstance(framing, Framing) else Framing(system=framing)


FramingLike = Union[Framing, str]


class PromptFormat:
    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.uses_chat_template = bool(getattr(tokenizer, "chat_template", None))
        self._split: dict[Framing, tuple[str, str] | None] = {}

    def encode_prompts(self, framing: FramingLike, texts: Sequence[str]) -> list[tuple[int, ...]]:
        framing = Framing.of(framing)
        if not texts:
            return []
        rendered = self.render(framing, texts)
        if self.framing_spells_special_token(framing):
            # a label or question in the system message (or a suffix) that spells a special token:
            # every prompt of the call is encoded piece by piece, so they still share one prefix
            return [self._encode_framing_as_data(framing, text, rendered[index]) for index, text in enumerate(texts)]
        encoded = [tuple(ids) for ids in self.tokenizer(rendered, add_special_tokens=not self.uses_chat_template)["input_ids"]]
        for index, text in enumerate(texts):
            if self.spells_special_token(text):
                encoded[index] = self._encode_as_data(framing, text, rendered[index])
        return encoded

    def framing_spells_special_token(self, framing: Framing) -> bool:
        """Whether the call's own strings (its system message: labels, questions, a task;
        its suffix or answer prefix) spell a special token — data all the same."""
        return any(self.spells_special_token(part) for part in (framing.system or "", framing.suffix, framing.answer_prefix))

    def encode_label(self, label: str, framing: FramingLike = Framing()) -> tuple[int, ...]:
        """Token ids of an answer as it follows the prompt (after the framing's label prefix; after
        a space in the plain format); a label is data: special-token strings in it stay characters."""
        framing = Framing.of(framing)
        prefix = framing.label_prefix if self.uses_chat_template or framing.label_prefix else " "
        return tuple(self.tokenizer(prefix + label, add_special_tokens=False, split_special_tokens=True)["input_ids"])

    @property
    def end_of_answer(self) -> int | None:
        """The token that ends the model's answer (its end of turn in a chat template, else end of text)."""
        return getattr(self.tokenizer, "eos_token_id", None)

    @property
    def special_strings(self) -> tuple[str, ...]:
        """The texts of the tokenizer's special tokens."""
        if not hasattr(self, "_special_strings"):
            decoder = getattr(self.tokenizer, "added_tokens_decoder", {}) or {}
            found = {token.content for token in decoder.values() if getattr(token, "special", False) and token.content}
            found.update(t for t in getattr(self.tokenizer, "all_special_tokens", []) or [] if t)
            self._special_strings = tuple(sorted(found))
        return self._special_strings

    def spells_special_token(self, text: str) -> bool:
        return any(special in text for special in self.special_strings)

    def encode_pieces(self, pieces: Sequence[tuple[str, bool]], add_special_tokens: bool) -> tuple[int, ...]:
        """Token ids of consecutive pieces (text, is_data): framing pieces with special tokens,
        data pieces as plain characters. Special tokens (BOS) are added to the first piece only."""
        ids: list[int] = []
        for position, (text, is_data) in enumerate(pieces):
            if not text:
                continue
            ids.extend(
                self.tokenizer(text, add_special_tokens=add_special_tokens and position == 0, split_special_tokens=is_data)["input_ids"]
            )
        return tuple(ids)

    def _encode_as_data(self, framing: Framing, text: str, rendered: str) -> tuple[int, ...]:
        before, after = self.frame(framing)
        if rendered != before + text + after:  # a template that could not be split: find the text in it
            start = rendered.rfind(text)
            before, after = rendered[:start], rendered[start + len(text) :]
        return self.encode_pieces([(before, False), (text, True), (after, False)], not self.uses_chat_template)

    def _encode_framing_as_data(self, framing: Framing, text: str, rendered: str) -> tuple[int, ...]:
        """The prompt with only the template's own structure parsed for special tokens: the
        system message, the text, the suffix and the answer prefix are characters."""
        pieces = self._framing_pieces(framing, text)
        if pieces is None or "".join(p for p, _ in pieces) != rendered:
            # a template that rewrites its contents: the text as data, the framing around it
            # with special tokens off too (only a template that could not be split lands here)
            before, after = rendered[: rendered.rfind(text)], rendered[rendered.rfind(text) + len(text) :]
            pieces = [(before, True), (text, True), (after, True)]
        return self.encode_pieces(pieces, not self.uses_chat_template)

    def _framing_pieces(self, framing: Framing, text: str) -> list[tuple[str, bool]] | None:
        """(piece, is_data) of one prompt: the template's structure around the call's strings."""
        answer = [(framing.answer_prefix, True)]
        if not self.uses_chat_template:
            head = [(framing.system, True), ("\n\n", False)] if framing.system else []
            tail = [(framing.suffix, True), ("\n\n", False)] + (answer if framing.answer_prefix else [("Answer:", False)])
            return head + [(text, True)] + tail
        system_mark = "\u0000AISQL_SYSTEM\u0000"
        shape = Framing(system=None if framing.system is None else system_mark)
        rendered = self._apply_chat(shape, _SENTINEL)
        if rendered.count(_SENTINEL) != 1 or (framing.system is not None and rendered.count(system_mark) != 1):
            return None
        before, after = rendered.split(_SENTINEL)
        head = [(before, False)]
        if framing.system is not None:
            first, second = before.split(system_mark)
            if system_mark in after:
                return None
            head = [(first, False), (framing.system, True), (second, False)]
        return head + [(text, True), (framing.suffix, True), (after, False)] + answer

    def frame(self, framing: FramingLike) -> tuple[str, str]:
        """The text around the user's text: (before, after). For chat templates that cannot be
        split around a sentinel, an approximation from rendering an empty text."""
        framing = Framing.of(framing)
        if not self.uses_chat_template:
            before = f"{framing.system}\n\n" if framing.system else ""
            return before, f"{framing.suffix}\n\n{framing.answer_prefix or 'Answer:'}"
        split = self._split_for(framing)
        return split if split is not None else (self._apply_chat(framing, ""), framing.answer_prefix)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Token counts of raw strings as the model would tokenize them within a prompt."""
        return [len(ids) for ids in self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]]

    def render(self, framing: FramingLike, texts: Sequence[str]) -> list[str]:
        framing = Framing.of(framing)
        split = self._split_for(framing) if self.uses_chat_template else self.frame(framing)
        if split is None:
            return [self._apply_chat(framing, t) + framing.answer_prefix for t in texts]
        before, after = split
        return [before + t + after for t in texts]

    def _split_for(self, framing: Framing) -> tuple[str, str] | None:
        if framing not in self._split:
            self._split[framing] = self._split_template(framing)
        return self._split[framing]

    def _split_template(self, framing: Framing) -> tuple[str, str] | None:
        rendered = self._apply_chat(framing, _SENTINEL)
        if rendered.count(_SENTINEL) != 1:
            return None
        before, after = rendered.split(_SENTINEL)
        probe = "Probe text, with  spaces\nand lines. "
        if self._apply_chat(framing, probe) != before + probe + after:
            return None
        return before, after + framing.answer_prefix

    def _apply_chat(self, framing: Framing, text: str) -> str:
        """The chat template over (system, user text + suffix), ready for the model's answer."""
        user = text + framing.suffix
        messages = ([{"role": "system", "content": framing.system}] if framing.system is not None else []) + [{"role": "user", "content": user}]
        kwargs = dict(tokenize=False, add_generation_prompt=True, enable_thinking=False)
        try:
            return self.tokenizer.apply_chat_template(messages, **kwargs)
        except Exception:  # templates without a system role
            merged = [{"role": "user", "content": f"{framing.system}\n\n{user}" if framing.system else user}]
            return self.tokenizer.apply_chat_template(merged, **kwargs)


def encode_labels(encode_label, end_of_answer: int | None, labels: Sequence[str], framing: FramingLike) -> tuple[tuple[int, ...], ...]:
    """Each label's token ids as an answer. Where one label's ids begin another's ("1" and
    "10"), a label's likelihood alone would also count the answers that go on (the model saying
    "10" makes "1" likely): every label then ends with the end of the answer, so each is scored
    as a complete answer. Labels none of which begins another keep their ids (disjoint answers
    already; the same scores and token counts as before)."""
    ids = [tuple(encode_label(label, framing)) for label in labels]
    prefixed = any(len(a) < len(b) and b[: len(a)] == a for a in ids for b in ids)
    if prefixed and end_of_answer is not None:
        ids = [label + (end_of_answer,) for label in ids]
    return tuple(ids)


class EncodesPrompts:
    """The prompt side of the Engine protocol, for engines that keep a PromptFormat in `format`."""

    format: PromptFormat

    @property
    def uses_chat_template(self) -> bool:
        return self.format.uses_chat_template

    def encode_prompt(self, framing: FramingLike, text: str) -> tuple[int, ...]:
        return self.format.encode_prompts(framing, [text])[0]

    def encode_prompts(self, framing: FramingLike, texts: Sequence[str]) -> list[tuple[int, ...]]:
        return self.format.encode_prompts(framing, texts)

    def encode_label(self, label: str, framing: FramingLike = Framing()) -> tuple[int, ...]:
        ids = self.format.encode_label(label, framing)
        if not ids:
            raise ModelError(f"label {label!r} encodes to no tokens")
        return ids
