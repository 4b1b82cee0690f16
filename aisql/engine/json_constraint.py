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

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np
import torch

DEAD_END = -1  # the row ends here (no token may follow)
JSON_PREFIX = "json:"  # a GenerateRequest.grammar naming a JSON schema: "json:" + the schema


@dataclass(frozen=True)
class Field:
    name: str
    kind: str  # "string" | "integer" | "number" | "boolean"
    array: bool = False


def flat_schema(fields: Sequence[Field]) -> dict:
    """The JSON schema of an object with exactly these fields, in this order, each nullable (a
    SQL NULL: the text does not say, or the budget ran out before it)."""
    properties = {}
    for field in fields:
        if field.array:
            properties[field.name] = {"type": ["array", "null"], "items": {"type": field.kind}}
        else:
            properties[field.name] = {"type": [field.kind, "null"]}
    return {"type": "object", "properties": properties, "required": [f.name for f in fields], "additionalProperties": False}


def grammar_of(fields: Sequence[Field]) -> str:
    """A GenerateRequest.grammar for these fields (also part of the task's cache key)."""
    return JSON_PREFIX + json.dumps([[f.name, f.kind, f.array] for f in fields], separators=(",", ":"))


def fields_of(grammar: str) -> tuple[Field, ...]:
    return tuple(Field(name, kind, array) for name, kind, array in json.loads(grammar[len(JSON_PREFIX) :]))


# ---- the shortest completion of a compact JSON prefix ----------------------------------------------
_EMPTY = {"string": '""', "integer": "0", "number": "0", "boolean": "false"}
_LITERALS = ("true", "false", "null")


def shortest_completion(text: str, fields: Sequence[Field]) -> str:
    """The shortest text that makes `text` — a prefix of a compact document of `flat_schema(fields)`
    — a whole document: fields not reached are null, an open array is closed as it stands."""
    state = _scan(text)
    if state.expect == "done":
        return text
    out = ""
    if state.in_string:
        if state.escape == 1:
            out += "\\"  # "\" + "\" is an escaped backslash
        elif state.escape > 1:
            out += "0" * (6 - state.escape)  # \uXXXX: pad the hex digits
        if state.string_is_key:  # finish the field name it can only be, then null
            name = next(f.name for f in fields if f.name not in state.keys and f.name.startswith(state.buffer))
            return text + name[len(state.buffer) :] + '":null' + _close_object(state.keys + [name], fields)
        out += '"'
        state.after_value = True
    elif state.partial:
        out += _finish_scalar(state.partial)
        state.after_value = True
    if state.in_array:
        if not state.after_value and state.array_needs_item:  # "[1," needs an item
            out += _EMPTY[_field(fields, state.current_key).kind]
        out += "]"
        state.after_value = True
    if state.expect == "colon":  # after "key"
        out += ":null"
    elif state.expect == "value" and not state.after_value:  # after "key":
        out += "null"
    elif state.expect == "object":  # nothing yet
        return text + "{" + ",".join(f'"{f.name}":null' for f in fields) + "}"
    keys = state.keys + ([state.current_key] if state.current_key is not None and state.current_key not in state.keys else [])
    if state.expect == "key_after_comma":
        rest = [f for f in fields if f.name not in keys]
        return text + out + ",".join(f'"{f.name}":null' for f in rest) + "}"
    return text + out + _close_object(keys, fields)


def _close_object(keys: list[str], fields: Sequence[Field]) -> str:
    rest = [f for f in fields if f.name not in keys]
    lead = "," if keys else ""
    return (lead + ",".join(f'"{f.name}":null' for f in rest) if rest else "") + "}"


def _field(fields: Sequence[Field], name: str | None) -> Field:
    return next((f for f in fields if f.name == name), fields[0])


def _finish_scalar(partial: str) -> str:
    for word in _LITERALS:
        if word.startswith(partial):
            return word[len(partial) :]
    if partial[-1] in "-+eE.":
        return "0"
    return ""


@dataclass
class _State:
    expect: str = "object"  # object | key | key_after_comma | value | done
    in_string: bool = False
    string_is_key: bool = False
    escape: int = 0  # 0: none; 1: after "\"; 2..5: inside \uXXXX (hex digits seen + 2)
    partial: str = ""  # a number or literal being written
    in_array: bool = False
    array_needs_item: bool = False
    after_value: bool = False
    current_key: str | None = None
    keys: list[str] = None  # type: ignore[assignment]
    buffer: str = ""


def _scan(text: str) -> _State:
    """Where a compact, flat document prefix stands (objects of scalars and arrays of scalars)."""
    s = _State(keys=[])
    for ch in text:
        if s.in_string:
            if s.escape == 1:
                s.escape = 2 if ch == "u" else 0
            elif s.escape >= 2:
                s.escape = s.escape + 1 if s.escape < 5 else 0
            elif ch == "\\":
                s.escape = 1
            elif ch == '"':
                s.in_string = False
                if s.string_is_key:
                    s.current_key = s.buffer
                    s.expect = "colon"
                else:
                    s.after_value = True
            else:
                s.buffer += ch
            continue
        if s.partial and ch not in "0123456789-+.eEtruefalsn":
            s.partial, s.after_value = "", True
        if ch == "{":
            s.expect = "key"
        elif ch == '"':
            s.in_string, s.buffer = True, ""
            s.string_is_key = s.expect in ("key", "key_after_comma")
            s.after_value = False
        elif ch == ":":
            s.expect, s.after_value = "value", False
        elif ch == "[":
            s.in_array, s.array_needs_item, s.after_value = True, False, False
        elif ch == "]":
            s.in_array, s.after_value = False, True
        elif ch == ",":
            if s.in_array:
                s.array_needs_item, s.after_value = True, False
            else:
                if s.current_key is not None and s.current_key not in s.keys:
                    s.keys.append(s.current_key)
                s.expect, s.after_value, s.current_key = "key_after_comma", False, None
        elif ch == "}":
            s.expect = "done"
        else:
            s.partial += ch
            s.after_value = False
            s.array_needs_item = False
    if s.partial and s.partial in _LITERALS or (s.partial and s.partial[-1].isdigit()):
        # a whole literal or a number that may stop here: nothing to finish
        s.partial, s.after_value = "", True
    return s


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
        """Speculation under the constraint: the draft's longest prefix equal to the row's own
        constrained choices, then the row's choice after it; and how many draft tokens were kept."""
        emitted: list[int] = []
        for index in range(len(draft) + 1):
            tokens = self.next(logits[index], remaining - index)
            if index < len(draft) and tokens == [draft[index]]:
                emitted.extend(tokens)
                continue
            return emitted + tokens, index
        return emitted, len(draft)  # not reached


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
    """A literal grammar (aisql.engine.constrained: int, double, bool) behind the same interface."""

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
        emitted: list[int] = []
        for index in range(len(draft) + 1):
            tokens = self.next(logits[index], remaining - index)
            if index < len(draft) and tokens == [draft[index]]:
                emitted.extend(tokens)
                continue
            return emitted + tokens, index
        return emitted, len(draft)


def row_constraint(grammar: str, tokenizer, stop_ids: tuple[int, ...]):
    """The per-row constraint of a GenerateRequest.grammar: a JSON schema or a literal type."""
    if grammar.startswith(JSON_PREFIX):
        return JsonRow(grammar, tokenizer, tuple(stop_ids))
    from aisql.engine.constrained import constraint_for

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
