"""Decoding constrained to a JSON schema (structured output), with llguidance.

llguidance (guidance-ai, Microsoft; Rust, a 3 MB wheel without dependencies) computes the mask
of tokens that keep the output a prefix of a document of the schema on the fly, in tens of
microseconds per token on CPU and with no per-schema precompilation over the vocabulary — unlike
outlines-core, which builds an index of the whole vocabulary per schema (seconds for a 49k
vocabulary), or xgrammar, which pulls triton on x86_64. Grammar engines are what vLLM and
SGLang use for the same job; llguidance is one of vLLM's backends.

Every step takes the model's most likely allowed token, so each answer is the model's own best
document of the schema. A row must end by `max_tokens`: before taking a token, the row checks
that the shortest completion of the document after it (`shortest_completion`: close the open
string, finish the number or literal, `null` for the fields not reached, close the brackets)
still fits the budget; where it would not, it emits that completion of the current text instead
and ends. So an answer always parses; a completion the matcher refuses (never seen; a guard)
ends the row where it is, and its value is NULL.

Speculation stays lossless: a draft is verified token by token under the mask (`verify`): a
draft token is kept only where it is the constrained choice the row would make without drafts.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import numpy as np
import torch

from aisql.engine.decoding.json_document import DEAD_END, JSON_PREFIX, fields_of, flat_schema, shortest_completion



# ---- one row of a batch ----------------------------------------------------------------------------
@lru_cache(maxsize=8)
def _ll_tokenizer(tokenizer_key: int, tokenizer, stop_ids: tuple[int, ...]):
    import llguidance.hf

    return llguidance.hf.from_tokenizer(tokenizer, n_vocab=len(tokenizer), eos_token=list(stop_ids))


@lru_cache(maxsize=64)
def _compiled(grammar: str) -> str:
    from llguidance import LLMatcher

    schema = flat_schema(fields_of(grammar))
    return LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"})


class JsonRow:
    """One row's constraint: an llguidance matcher over the row's tokens, and its text so far."""

    def __init__(self, grammar: str, tokenizer, stop_ids: tuple[int, ...]) -> None:
        from llguidance import LLMatcher

        self.fields = fields_of(grammar)
        self.tokenizer = tokenizer
        self.stop_ids = stop_ids
        self.vocab = len(tokenizer)
        self.ll_tokenizer = _ll_tokenizer(id(tokenizer), tokenizer, tuple(stop_ids))
        self.matcher = LLMatcher(self.ll_tokenizer, _compiled(grammar), log_level=0)
        if self.matcher.is_error():
            raise ValueError(f"invalid output schema: {self.matcher.get_error()}")
        self.data = b""
        self.ended = False

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="ignore")

    def _piece(self, token: int) -> bytes:
        return self.ll_tokenizer.decode_bytes([token])

    def _closing_ids(self, text: str) -> list[int]:
        suffix = shortest_completion(text, self.fields)[len(text) :]
        return self.tokenizer.encode(suffix, add_special_tokens=False) if suffix else []

    def minimum_tokens(self) -> int:
        """Tokens of the shortest whole document (every field null)."""
        return len(self._closing_ids(""))

    def next(self, logits: torch.Tensor, remaining: int) -> list[int]:
        """The tokens this row emits now (one, or its closing and the end), given the model's
        logits for its next position and the tokens left in its budget."""
        if self.ended or self.matcher.is_stopped():
            self.ended = True
            return [DEAD_END]
        allowed = self._allowed()
        if not allowed.any():
            self.ended = True
            return [DEAD_END]
        masked = logits.float().clone()
        masked[torch.from_numpy(~allowed).to(masked.device)] = float("-inf")
        token = int(torch.argmax(masked))
        if token in self.stop_ids:
            self.ended = True
            return [token]
        data = self.data + self._piece(token)
        after = data.decode("utf-8", errors="ignore")
        # Room after this token for the closing, and for the bytes that finish a character the
        # token leaves open (a byte-level token may split one): one token each at most.
        if 1 + _missing_bytes(data) + len(self._closing_ids(after)) <= remaining:
            self.matcher.consume_token(token)
            self.data += self._piece(token)
            return [token]
        return self._close(remaining)

    def _close(self, remaining: int) -> list[int]:
        """End the document by its shortest completion (within the budget, by construction)."""
        self.ended = True
        finish = self._finish_character()
        closing = finish + self._closing_ids(self.text)
        if len(closing) > remaining or self.matcher.validate_tokens(closing) != len(closing):
            return [DEAD_END]  # a guard: the answer is then NULL (incomplete document)
        rest = closing[len(finish) :]
        self.matcher.consume_tokens(rest)
        self.data += b"".join(self._piece(t) for t in rest)
        return closing + [DEAD_END]

    def _finish_character(self) -> list[int]:
        """Tokens of continuation bytes that complete a character the text ends inside (the
        smallest allowed ones: any character is valid in a JSON string)."""
        tokens: list[int] = []
        while _missing_bytes(self.data):
            allowed = np.nonzero(self._allowed())[0]
            fitting = [int(t) for t in allowed if _continuation(self._piece(int(t)), _missing_bytes(self.data))]
            if not fitting:
                return tokens
            token = min(fitting)
            self.matcher.consume_token(token)
            self.data += self._piece(token)
            tokens.append(token)
        return tokens

    def _allowed(self) -> np.ndarray:
        bits = np.unpackbits(np.frombuffer(self.matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
        allowed = np.zeros(self.vocab, dtype=bool)
        n = min(self.vocab, len(bits))
        allowed[:n] = bits[:n].astype(bool)
        return allowed

    def verify(self, draft: Sequence[int], logits: torch.Tensor, remaining: int) -> tuple[list[int], int]:
        return verify_draft(self, draft, logits, remaining)


def _missing_bytes(data: bytes) -> int:
    """Continuation bytes the last UTF-8 character of `data` still needs (0: it is complete)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:
            continue  # a continuation byte: look further back for the lead
        width = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4 if byte & 0xF8 == 0xF0 else 1
        return max(0, width - back)
    return 0


def _continuation(piece: bytes, missing: int) -> bool:
    return 0 < len(piece) <= missing and all(b & 0xC0 == 0x80 for b in piece)


class LiteralRow:
    """A literal grammar (aisql.engine.decoding.constrained: int, double, bool) behind the same interface."""

    def __init__(self, constraint) -> None:
        self.constraint = constraint
        self.text = ""

    def next(self, logits: torch.Tensor, remaining: int) -> list[int]:
        choice = self.constraint.choose(logits, self.text)
        if choice is None:
            return [DEAD_END]
        if choice not in self.constraint.stop_ids:
            self.text += self.constraint.piece(choice)
        return [choice]

    def verify(self, draft: Sequence[int], logits: torch.Tensor, remaining: int) -> tuple[list[int], int]:
        return verify_draft(self, draft, logits, remaining)


def verify_draft(row, draft: Sequence[int], logits: torch.Tensor, remaining: int) -> tuple[list[int], int]:
    """Speculation under a constraint: the draft's longest prefix equal to the row's own
    constrained choices (each taken as `row.next` would without drafts), then the row's choice
    after it; and how many draft tokens were kept. So drafting never changes an answer."""
    emitted: list[int] = []
    for index in range(len(draft) + 1):
        tokens = row.next(logits[index], remaining - index)
        if index < len(draft) and tokens == [draft[index]]:
            emitted.extend(tokens)
            continue
        return emitted + tokens, index
    return emitted, len(draft)  # not reached: the loop returns at index len(draft)


def row_constraint(grammar: str, tokenizer, stop_ids: tuple[int, ...]):
    """The per-row constraint of a GenerateRequest.grammar: a JSON schema or a literal type."""
    if grammar.startswith(JSON_PREFIX):
        return JsonRow(grammar, tokenizer, tuple(stop_ids))
    from aisql.engine.decoding.constrained import constraint_for

    return LiteralRow(constraint_for(grammar, tokenizer, stop_ids))


def check_budget(constraint, max_tokens: int) -> None:
    """A JSON row needs room for at least its shortest document (every field null): a smaller
    max_tokens is an error, never a silently NULL answer."""
    if isinstance(constraint, JsonRow):
        needed = constraint.minimum_tokens()
        if max_tokens < needed:
            from aisql.errors import ModelError

            raise ModelError(
                f"max_tokens {max_tokens} is less than the {needed} tokens of the schema's shortest document (every field null)",
                hint=f"give max_tokens => {needed} or more",
            )
