"""Prompts in a model's own format: its chat template when it has one, a plain framing otherwise.

Every prompt of an AI call is (fixed instruction, varying text). The instruction goes first — as
the system message — so all prompts of a call share it as a token prefix. A chat template is
rendered once per instruction with a sentinel and split around it (checked to reproduce the
template verbatim), instead of once per prompt.

Data never becomes prompt structure: only the framing may produce special tokens. A text (or a
label) that spells a special token (`<|im_end|>`, `<|endoftext|>`, ...) is encoded piece by piece
— the framing with special tokens, the text with special-token parsing off — so the model reads
those characters as characters. Texts without such strings are encoded in one go, as before
(the same token ids).
"""

from __future__ import annotations

from typing import Sequence

from aisql.errors import ModelError

PLAIN_FORMAT = "{instruction}\n\n{text}\n\nAnswer:"
_SENTINEL = "\u0000AISQL_TEXT\u0000"


class PromptFormat:
    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.uses_chat_template = bool(getattr(tokenizer, "chat_template", None))
        self._split: dict[str, tuple[str, str] | None] = {}

    def encode_prompts(self, instruction: str, texts: Sequence[str]) -> list[tuple[int, ...]]:
        if not texts:
            return []
        rendered = self.render(instruction, texts)
        encoded = [tuple(ids) for ids in self.tokenizer(rendered, add_special_tokens=not self.uses_chat_template)["input_ids"]]
        for index, text in enumerate(texts):
            if self.spells_special_token(text):
                encoded[index] = self._encode_as_data(instruction, text, rendered[index])
        return encoded

    def encode_label(self, label: str) -> tuple[int, ...]:
        """Token ids of an answer as it follows the prompt (after a space in the plain framing);
        a label is data: special-token strings in it stay characters."""
        text = label if self.uses_chat_template else " " + label
        return tuple(self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])

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

    def _encode_as_data(self, instruction: str, text: str, rendered: str) -> tuple[int, ...]:
        before, after = self.frame(instruction)
        if rendered != before + text + after:  # a template that could not be split: find the text in it
            start = rendered.rfind(text)
            before, after = rendered[:start], rendered[start + len(text) :]
        return self.encode_pieces([(before, False), (text, True), (after, False)], not self.uses_chat_template)

    def frame(self, instruction: str) -> tuple[str, str]:
        """The text around the user's text: (before, after). For chat templates that cannot be
        split around a sentinel, an approximation from rendering an empty text."""
        if not self.uses_chat_template:
            before, after = PLAIN_FORMAT.split("{text}")
            return before.format(instruction=instruction), after
        if instruction not in self._split:
            self._split[instruction] = self._split_template(instruction)
        split = self._split[instruction]
        return split if split is not None else (self._apply_chat(instruction, ""), "")

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Token counts of raw strings as the model would tokenize them within a prompt."""
        return [len(ids) for ids in self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]]

    def render(self, instruction: str, texts: Sequence[str]) -> list[str]:
        if not self.uses_chat_template:
            return [PLAIN_FORMAT.format(instruction=instruction, text=t) for t in texts]
        if instruction not in self._split:
            self._split[instruction] = self._split_template(instruction)
        split = self._split[instruction]
        if split is None:
            return [self._apply_chat(instruction, t) for t in texts]
        before, after = split
        return [before + t + after for t in texts]

    def _split_template(self, instruction: str) -> tuple[str, str] | None:
        rendered = self._apply_chat(instruction, _SENTINEL)
        if rendered.count(_SENTINEL) != 1:
            return None
        before, after = rendered.split(_SENTINEL)
        probe = "Probe text, with  spaces\nand lines. "
        if self._apply_chat(instruction, probe) != before + probe + after:
            return None
        return before, after

    def _apply_chat(self, instruction: str, text: str) -> str:
        messages = [{"role": "system", "content": instruction}, {"role": "user", "content": text}]
        kwargs = dict(tokenize=False, add_generation_prompt=True, enable_thinking=False)
        try:
            return self.tokenizer.apply_chat_template(messages, **kwargs)
        except Exception:  # templates without a system role
            merged = [{"role": "user", "content": f"{instruction}\n\n{text}"}]
            return self.tokenizer.apply_chat_template(merged, **kwargs)


class EncodesPrompts:
    """The prompt side of the Engine protocol, for engines that keep a PromptFormat in `format`."""

    format: PromptFormat

    @property
    def uses_chat_template(self) -> bool:
        return self.format.uses_chat_template

    def encode_prompt(self, instruction: str, text: str) -> tuple[int, ...]:
        return self.format.encode_prompts(instruction, [text])[0]

    def encode_prompts(self, instruction: str, texts: Sequence[str]) -> list[tuple[int, ...]]:
        return self.format.encode_prompts(instruction, texts)

    def encode_label(self, label: str) -> tuple[int, ...]:
        ids = self.format.encode_label(label)
        if not ids:
            raise ModelError(f"label {label!r} encodes to no tokens")
        return ids
