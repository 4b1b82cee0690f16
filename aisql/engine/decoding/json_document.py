"""JSON documents of a flat schema, without torch: the fields a structured-output call declares,
their JSON schema and the `GenerateRequest.grammar` naming it, and the shortest completion of a
document prefix (what the decoder emits when the budget ends; aisql.engine.decoding.json_constraint).

Kept apart from the decoder so that binding and planning a structured-output call, or a fully
cached rerun of one, import no torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence


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
        if state.string_is_key:  # finish the field name it can only be, then null
            finished = _finish_key(state.buffer, fields, state.keys)
            if finished is None:
                return text  # no field's name begins so (never seen: the matcher writes names); refused by the caller
            ending, name = finished
            return text + ending + ":null" + _close_object(state.keys + [name], fields)
        out += _escape_tail(state)
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
        return text + "{" + ",".join(f"{_quoted(f.name)}:null" for f in fields) + "}"
    keys = state.keys + ([state.current_key] if state.current_key is not None and state.current_key not in state.keys else [])
    if state.expect == "key_after_comma":
        rest = [f for f in fields if f.name not in keys]
        return text + out + ",".join(f"{_quoted(f.name)}:null" for f in rest) + "}"
    return text + out + _close_object(keys, fields)


def _close_object(keys: list[str], fields: Sequence[Field]) -> str:
    rest = [f for f in fields if f.name not in keys]
    lead = "," if keys else ""
    return (lead + ",".join(f"{_quoted(f.name)}:null" for f in rest) if rest else "") + "}"


def _quoted(name: str) -> str:
    """A field name as a JSON string, as the grammar writes it: quotes, backslashes and control
    characters escaped, other characters (non-ASCII too) as they are."""
    return json.dumps(name, ensure_ascii=False)


def _escape_tail(state: "_State") -> str:
    """What completes an escape the string stands in the middle of."""
    if state.escape == 1:
        return "\\"  # "\" + "\" is an escaped backslash
    if state.escape > 1:
        return "0" * (6 - state.escape)  # \uXXXX: pad the hex digits
    return ""


_SHORT_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "\b": "b", "\f": "f", "\n": "n", "\r": "r", "\t": "t"}


def _utf16_units(text: str) -> str:
    """`text` as UTF-16 code units (an astral character as its two surrogates): JSON's \\u escapes
    spell those, so a key cut between two surrogates still compares with a name."""
    raw = text.encode("utf-16-be", "surrogatepass")
    return "".join(chr(int.from_bytes(raw[i : i + 2], "big")) for i in range(0, len(raw), 2))


def _json_units(units: str) -> str:
    """UTF-16 units as JSON string content: a whole surrogate pair as its character, a lone
    surrogate (the second half of one begun as an escape) as \\uXXXX."""
    out, i = [], 0
    while i < len(units):
        unit = units[i]
        if 0xD800 <= ord(unit) <= 0xDBFF and i + 1 < len(units) and 0xDC00 <= ord(units[i + 1]) <= 0xDFFF:
            out.append(units[i : i + 2].encode("utf-16-be", "surrogatepass").decode("utf-16-be"))
            i += 2
            continue
        out.append(f"\\u{ord(unit):04x}" if 0xD800 <= ord(unit) <= 0xDFFF else json.dumps(unit, ensure_ascii=False)[1:-1])
        i += 1
    return "".join(out)


def _finish_key(raw: str, fields: Sequence[Field], written: list[str]) -> tuple[str, str] | None:
    """The text that ends a key begun as `raw` (its JSON source after the opening quote, perhaps
    stopping inside an escape) as the name of a field not yet written, and that name. The name
    may be spelled with any JSON escapes (`\\"`, `\\u00e9` or `é`); None if no field fits."""
    cut = raw.rfind("\\")
    pending = ""
    if cut >= 0 and (cut + 1 - len(raw[: cut + 1].rstrip("\\"))) % 2 == 1:  # an odd run of backslashes: the last opens an escape
        tail = raw[cut:]
        if tail == "\\" or (tail.startswith("\\u") and len(tail) < 6):
            pending, raw = tail, raw[:cut]
    try:
        begun = _utf16_units(json.loads('"' + raw + '"'))
    except ValueError:
        return None
    for field in fields:
        if field.name in written:
            continue
        units = _utf16_units(field.name)
        if not units.startswith(begun):
            continue
        rest = units[len(begun) :]
        if not pending:
            return _json_units(rest) + '"', field.name
        if not rest:
            continue
        spelled = _finish_escape(pending, rest[0])
        if spelled is not None:
            return spelled + _json_units(rest[1:]) + '"', field.name
    return None


def _finish_escape(pending: str, unit: str) -> str | None:
    """The characters that make the escape `pending` ("\\" or "\\u" and up to 3 hex digits) spell `unit`."""
    if pending == "\\":
        return _SHORT_ESCAPES.get(unit) or f"u{ord(unit):04x}"
    digits, full = pending[2:].lower(), f"{ord(unit):04x}"
    return full[len(digits) :] if full.startswith(digits) else None


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
    buffer: str = ""  # the open string's JSON source (escapes as written)


def _decoded(source: str) -> str:
    try:
        return json.loads('"' + source + '"')
    except ValueError:
        return source


def _scan(text: str) -> _State:
    """Where a compact, flat document prefix stands (objects of scalars and arrays of scalars)."""
    s = _State(keys=[])
    for ch in text:
        if s.in_string:
            if s.escape == 1:
                s.escape = 2 if ch == "u" else 0
                s.buffer += ch
            elif s.escape >= 2:
                s.escape = s.escape + 1 if s.escape < 5 else 0
                s.buffer += ch
            elif ch == "\\":
                s.escape = 1
                s.buffer += ch
            elif ch == '"':
                s.in_string = False
                if s.string_is_key:
                    s.current_key = _decoded(s.buffer)
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
