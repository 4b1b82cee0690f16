"""PROMPT templates: literal text with `{placeholders}`.

A template is parsed once into alternating literal parts and placeholders. Placeholders are either
positional (`{0}`, bound to the extra PROMPT arguments, Snowflake style) or named (`{col}`,
`{alias.col}`, `{"odd col"}`, bound to columns). `{{` and `}}` stand for literal braces.

The planner keeps the static prefix (text before the first placeholder) in mind: every prompt of an
AI call starts with it, which is what makes prefix KV reuse pay off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from aisql.errors import TemplateError


@dataclass(frozen=True)
class Placeholder:
    """One `{...}` in a template: a positional index or a (qualifier, column) name."""

    text: str  # as written, without braces
    offset: int  # character offset of the opening brace in the template text
    index: int | None = None  # positional placeholders
    qualifier: str | None = None  # named placeholders: table alias or name, if given
    column: str | None = None

    @property
    def is_positional(self) -> bool:
        return self.index is not None


@dataclass(frozen=True)
class Template:
    """Parsed template: `parts[i]` precedes `slots[i]`; `parts` has one more entry than `slots`.

    `slots[i]` is the index into the template's argument list that fills that gap, so a placeholder
    used twice binds one argument once.
    """

    text: str
    parts: tuple[str, ...]
    slots: tuple[int, ...]
    placeholders: tuple[Placeholder, ...]  # distinct, in order of the argument list

    @property
    def arity(self) -> int:
        return len(self.placeholders)

    @property
    def static_prefix(self) -> str:
        return self.parts[0]

    def render(self, values: Sequence[str]) -> str:
        """Fill the gaps. `values` are already strings (SQL casts them); None never reaches here.
        Called once or twice per prompt of a node (millions on a worker pool): kept lean."""
        if len(values) != len(self.placeholders):
            raise ValueError(f"template expects {self.arity} values, got {len(values)}")
        parts = self.parts
        out = [parts[0]]
        for slot, part in zip(self.slots, parts[1:]):
            out += (values[slot], part)
        return "".join(out)

    @staticmethod
    def identity() -> "Template":
        """The template of a prompt given as a plain VARCHAR expression: the value is the prompt."""
        return Template(text="{0}", parts=("", ""), slots=(0,), placeholders=(Placeholder("0", 0, index=0),))


def from_parts(pieces: Sequence[str | None]) -> Template:
    """The template of a prompt written as a sequence of literal text and values (BigQuery's
    `('Is this positive: ', review)`): a string is literal text, None is the next value. The
    result renders exactly the concatenation, and its literal head is the static prefix."""
    parts, slots, placeholders, shown = [""], [], [], []
    for piece in pieces:
        if piece is None:
            index = len(placeholders)
            placeholders.append(Placeholder(str(index), sum(len(x) for x in shown), index=index))
            slots.append(index)
            parts.append("")
            shown.append(f"{{{index}}}")
        else:
            parts[-1] += piece
            shown.append(piece.replace("{", "{{").replace("}", "}}"))
    return Template(text="".join(shown), parts=tuple(parts), slots=tuple(slots), placeholders=tuple(placeholders))


def parse_template(text: str) -> Template:
    """Split `text` into literal parts and placeholders, raising TemplateError on bad braces."""
    parts: list[str] = []
    slots: list[int] = []
    distinct: dict[tuple, int] = {}
    placeholders: list[Placeholder] = []
    current: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "{":
            if i + 1 < n and text[i + 1] == "{":
                current.append("{")
                i += 2
                continue
            end = text.find("}", i + 1)
            if end < 0:
                raise TemplateError(
                    f"unclosed '{{' at character {i + 1} of PROMPT template {text!r}",
                    hint="write '{{' for a literal brace",
                )
            inner = text[i + 1 : end]
            if "{" in inner:
                raise TemplateError(
                    f"unexpected '{{' inside placeholder at character {i + 1} of PROMPT template {text!r}"
                )
            ph = _parse_placeholder(inner, i, text)
            key = ("pos", ph.index) if ph.is_positional else ("name", (ph.qualifier or "").lower(), ph.column.lower())
            if key not in distinct:
                distinct[key] = len(placeholders)
                placeholders.append(ph)
            parts.append("".join(current))
            current = []
            slots.append(distinct[key])
            i = end + 1
        elif ch == "}":
            if i + 1 < n and text[i + 1] == "}":
                current.append("}")
                i += 2
                continue
            raise TemplateError(
                f"unmatched '}}' at character {i + 1} of PROMPT template {text!r}",
                hint="write '}}' for a literal brace",
            )
        else:
            current.append(ch)
            i += 1
    parts.append("".join(current))
    return Template(text=text, parts=tuple(parts), slots=tuple(slots), placeholders=tuple(placeholders))


def _parse_placeholder(inner: str, offset: int, text: str) -> Placeholder:
    """`0` | `col` | `alias.col` | `"quoted col"` | `alias."quoted.col"`."""
    stripped = inner.strip()
    if not stripped:
        raise TemplateError(f"empty placeholder '{{}}' at character {offset + 1} of PROMPT template {text!r}")
    if stripped.isdigit():
        return Placeholder(text=inner, offset=offset, index=int(stripped))
    names = _split_name(stripped)
    if names is None or not 1 <= len(names) <= 2 or any(not n for n in names):
        raise TemplateError(
            f"malformed placeholder '{{{inner}}}' at character {offset + 1} of PROMPT template {text!r}",
            hint='use {column}, {alias.column} or {"column name"}',
        )
    qualifier = names[0] if len(names) == 2 else None
    return Placeholder(text=inner, offset=offset, qualifier=qualifier, column=names[-1])


def _split_name(name: str) -> list[str] | None:
    """Split a dotted name whose parts may be double-quoted; None if quotes are unbalanced."""
    out: list[str] = []
    buf: list[str] = []
    i = 0
    while i < len(name):
        ch = name[i]
        if ch == '"':
            end = name.find('"', i + 1)
            if end < 0:
                return None
            buf.append(name[i + 1 : end])
            i = end + 1
        elif ch == ".":
            out.append("".join(buf).strip())
            buf = []
            i += 1
        else:
            buf.append(ch)
            i += 1
    out.append("".join(buf).strip())
    return out
