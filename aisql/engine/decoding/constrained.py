"""Greedy decoding constrained to a literal of a SQL type: at every step the model's most likely
token among those that keep the output a prefix of a valid literal, and the end of sequence only
once the output is a whole literal. So AI.GENERATE_INT answers an integer, always.

A grammar is a regular language given by two checks on text: `could_become` (a prefix of some
literal) and `is_complete` (a literal). Only tokens whose text uses the grammar's characters can
ever be allowed, so each grammar keeps that short candidate list per tokenizer (a few hundred of
a 50k vocabulary) and tests only those at each step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import torch


@dataclass(frozen=True)
class LiteralGrammar:
    name: str
    alphabet: frozenset[str]
    prefix: re.Pattern  # fullmatch: text that can still become a literal
    complete: re.Pattern  # fullmatch: a whole literal
    max_chars: int = 40

    def could_become(self, text: str) -> bool:
        return len(text) <= self.max_chars and self.prefix.fullmatch(text) is not None

    def is_complete(self, text: str) -> bool:
        return self.complete.fullmatch(text) is not None


DEAD_END = -1  # no token may follow: the row ends here (its text may be incomplete)
_DIGITS = "0123456789"
GRAMMARS: dict[str, LiteralGrammar] = {
    "int": LiteralGrammar(
        "int",
        frozenset(_DIGITS + "-+ "),
        re.compile(r" ?[-+]?\d{0,19}"),
        re.compile(r" ?[-+]?\d{1,19}"),
    ),
    "double": LiteralGrammar(
        "double",
        frozenset(_DIGITS + "-+.eE "),
        re.compile(r" ?[-+]?(\d+(\.\d*)?|\.\d*)?([eE][-+]?\d*)?"),
        re.compile(r" ?[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?"),
    ),
    "bool": LiteralGrammar(
        "bool",
        frozenset("truefalsTRUEFALS "),
        re.compile(r" ?(t|tr|tru|true|f|fa|fal|fals|false)?", re.IGNORECASE),
        re.compile(r" ?(true|false)", re.IGNORECASE),
    ),
}


class Constraint:
    """One grammar over one tokenizer's vocabulary: the mask of allowed next tokens for a text."""

    def __init__(self, grammar: LiteralGrammar, token_texts: tuple[str, ...], stop_ids: tuple[int, ...]) -> None:
        self.grammar = grammar
        self.stop_ids = stop_ids
        self.token_texts = token_texts
        self.candidates = [
            (token_id, text) for token_id, text in enumerate(token_texts) if text and set(text) <= grammar.alphabet
        ]

    def piece(self, token_id: int) -> str:
        return self.token_texts[token_id] if 0 <= token_id < len(self.token_texts) else ""

    def allowed(self, text: str) -> list[int]:
        """Token ids that may follow `text` (end-of-sequence ids once `text` is a literal)."""
        ids = [token_id for token_id, piece in self.candidates if self.grammar.could_become(text + piece)]
        if self.grammar.is_complete(text):
            ids.extend(self.stop_ids)
        return ids

    def choose(self, logits: torch.Tensor, text: str) -> int | None:
        """The most likely allowed token for one row's logits [vocab]; None if the literal ends
        here. Once `text` is a whole literal, a model whose own first choice leaves the grammar
        ("8" then " legs") has finished the literal: it ends, rather than being pushed into more
        digits ("80000000000")."""
        ids = self.allowed(text)
        if not ids:
            return None
        if self.grammar.is_complete(text) and int(torch.argmax(logits)) not in set(ids):
            return None
        index = torch.tensor(ids, device=logits.device)
        return ids[int(torch.argmax(logits.index_select(0, index)))]


@lru_cache(maxsize=16)
def _token_texts(tokenizer_key: int, tokenizer) -> tuple[str, ...]:
    size = len(tokenizer)
    return tuple(tokenizer.decode([i], skip_special_tokens=False, clean_up_tokenization_spaces=False) for i in range(size))


def constraint_for(name: str, tokenizer, stop_ids) -> Constraint:
    """The constraint of grammar `name` ('int', 'double', 'bool') for `tokenizer` (cached per tokenizer)."""
    return _constraint(name, id(tokenizer), tokenizer, tuple(stop_ids))


@lru_cache(maxsize=32)
def _constraint(name: str, key: int, tokenizer, stop_ids: tuple[int, ...]) -> Constraint:
    return Constraint(GRAMMARS[name], _token_texts(key, tokenizer), stop_ids)


def refuse_grammar(requests, engine: str) -> None:
    """Engines without constrained decoding refuse typed generation instead of answering free text."""
    if any(getattr(r, "grammar", None) for r in requests):
        from aisql.errors import ModelError

        raise ModelError(
            f"typed generation (AI.GENERATE_INT / _DOUBLE / _BOOL) needs the built-in engine; {engine} cannot constrain decoding here",
            hint="run without the vllm:/openai: prefix, or use AI.GENERATE and CAST its result",
        )
