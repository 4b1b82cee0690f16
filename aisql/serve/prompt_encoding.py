"""Request text to token ids for `aisql serve`: completions' prompts (text or ids checked against
the vocabulary) and chat messages through the model's chat template — a message that spells a
special token encoded as plain characters, never as the token. A text longer than the context
could hold is refused by its characters, before it is tokenized.
"""

from __future__ import annotations

from aisql.serve.protocol import ApiError


class PromptEncoder:
    def __init__(self, tokenizer, prompt_format, max_context: int) -> None:
        self.tokenizer = tokenizer
        self.format = prompt_format
        self.max_context = max_context
        self._max_prompt_chars = max_context * max((len(t) for t in tokenizer.get_vocab()), default=1)

    def encode_text(self, text: str) -> list[int]:
        if len(text) > self._max_prompt_chars:  # more characters than the context could hold as tokens
            self._context_error(len(text) // max(1, self._max_prompt_chars // self.max_context), 0, "prompt")
        return list(self.tokenizer(text)["input_ids"])

    def _context_error(self, prompt_tokens: int, max_tokens: int, param: str):
        context = self.max_context
        raise ApiError(
            f"This model's maximum context length is {context} tokens. However, you requested "
            f"at least {prompt_tokens + max_tokens} tokens.",
            param=param,
            code="context_length_exceeded",
        )

    def check_ids(self, ids: list[int], param: str = "prompt") -> list[int]:
        vocab = len(self.tokenizer)
        bad = next((t for t in ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise ApiError(f"'{param}' holds token id {bad}, outside the vocabulary (0..{vocab - 1})", param=param)
        return ids

    def encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
        total = sum(len(m["content"]) for m in messages)
        if total > self._max_prompt_chars:
            self._context_error(total // max(1, self._max_prompt_chars // self.max_context), 0, "messages")
        fmt = self.format
        if not fmt.uses_chat_template:
            text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"
            return self.encode_text(text)
        if any(fmt.spells_special_token(m["content"]) for m in messages):
            return self._encode_chat_as_data(messages)
        return list(self.tokenizer(self._render_chat(messages), add_special_tokens=False)["input_ids"])

    def _render_chat(self, messages: list[dict[str, str]]) -> str:
        try:
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except Exception as err:  # noqa: BLE001 - the template's own complaint, e.g. roles out of order
            raise ApiError(f"the model's chat template refused these messages: {err}", param="messages") from None

    def _encode_chat_as_data(self, messages: list[dict[str, str]]) -> list[int]:
        """Messages that spell special tokens: the template renders markers in their place, and
        the contents are encoded as plain characters between the framing's tokens."""
        markers = [f"\u0000AISQL_MESSAGE_{i}\u0000" for i in range(len(messages))]
        rendered = self._render_chat([{**m, "content": marker} for m, marker in zip(messages, markers)])
        pieces: list[tuple[str, bool]] = []
        rest = rendered
        for message, marker in zip(messages, markers):
            before, found, rest = rest.partition(marker)
            if not found:
                raise ApiError(
                    "a message spells one of the model's special tokens and this chat template does not keep message "
                    "text verbatim, so it cannot be sent as plain text",
                    param="messages",
                )
            pieces += [(before, False), (message["content"], True)]
        pieces.append((rest, False))
        return list(self.format.encode_pieces(pieces, add_special_tokens=False))
