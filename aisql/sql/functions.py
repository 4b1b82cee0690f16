"""The AI functions' spellings and argument rules.

BigQuery spells them `AI.IF`, `AI.CLASSIFY`, `AI.GENERATE`; Snowflake `AI_FILTER`, `AI_CLASSIFY`,
`AI_COMPLETE`. sqlglot parses them into three shapes (a dotted call, an anonymous function, or one
of its own `exp.AI*` classes); `match_ai_call` normalises all of them to one `RawAICall`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from aisql.errors import BindError
from aisql.sql.calls import AIKind

DOTTED = {"IF": AIKind.IF, "CLASSIFY": AIKind.CLASSIFY, "GENERATE": AIKind.GENERATE}
FLAT = {
    "AI_IF": AIKind.IF,
    "AI_FILTER": AIKind.IF,
    "AI_CLASSIFY": AIKind.CLASSIFY,
    "AI_GENERATE": AIKind.GENERATE,
    "AI_COMPLETE": AIKind.GENERATE,
}
KNOWN_SPELLINGS = "AI.IF / AI_FILTER, AI.CLASSIFY / AI_CLASSIFY, AI.GENERATE / AI_COMPLETE"

DEFAULT_MAX_TOKENS = 128
MAX_MAX_TOKENS = 8192
OPTION_KEYS = {"selectivity", "anchor"}


@dataclass
class RawAICall:
    """An AI call as written: positional and named arguments, not yet validated."""

    node: exp.Expression  # the whole call node in the AST (the Dot for AI.IF)
    kind: AIKind
    spelling: str
    positional: list[exp.Expression]
    named: dict[str, exp.Expression] = field(default_factory=dict)


def match_ai_call(node: exp.Expression) -> RawAICall | None:
    """Recognise an AI function call node; None for anything else. Unknown `AI.X` is an error."""
    if isinstance(node, exp.Dot) and isinstance(node.this, (exp.Identifier, exp.Column)):
        if node.this.name.upper() != "AI" or not isinstance(node.expression, exp.Func):
            return None
        func = node.expression
        name = func.name.upper() if isinstance(func, exp.Anonymous) else func.sql_name().upper()
        if name not in DOTTED:
            raise BindError(
                f"unknown AI function AI.{name}",
                hint=f"known: {KNOWN_SPELLINGS}",
            )
        return _split_args(node, DOTTED[name], f"AI.{name}", list(func.expressions))
    if isinstance(node, exp.Anonymous) and node.name.upper() in FLAT:
        name = node.name.upper()
        return _split_args(node, FLAT[name], name, list(node.expressions))
    if isinstance(node, exp.AIClassify):
        args = [node.this, node.args.get("categories")]
        if node.args.get("config") is not None:
            args.append(node.args["config"])
        return _split_args(node, AIKind.CLASSIFY, "AI_CLASSIFY", [a for a in args if a is not None])
    if isinstance(node, exp.AIGenerate):
        return _split_args(node, AIKind.GENERATE, "AI_GENERATE", list(node.expressions))
    return None


def is_prompt_call(node: exp.Expression) -> bool:
    return isinstance(node, exp.Anonymous) and node.name.upper() == "PROMPT"


def _split_args(node: exp.Expression, kind: AIKind, spelling: str, args: list[exp.Expression]) -> RawAICall:
    positional: list[exp.Expression] = []
    named: dict[str, exp.Expression] = {}
    for arg in args:
        if isinstance(arg, (exp.Kwarg, exp.PropertyEQ)):
            key = arg.this.name.lower()
            if key in named:
                raise BindError(f"{spelling}: argument {key!r} given twice")
            named[key] = arg.expression
        else:
            if named:
                raise BindError(f"{spelling}: positional argument after a named argument")
            positional.append(arg)
    return RawAICall(node=node, kind=kind, spelling=spelling, positional=positional, named=named)


@dataclass(frozen=True)
class CallOptions:
    labels: tuple[str, ...] = ()
    max_tokens: int | None = None
    hints: dict[str, Any] = field(default_factory=dict)


def read_options(raw: RawAICall) -> tuple[exp.Expression, CallOptions]:
    """Validate a call's arguments: returns the prompt expression and its options.

    Signatures: AI.IF(prompt [, options]); AI.CLASSIFY(prompt, labels [, options]) or
    `categories => labels`; AI.GENERATE(prompt [, max_tokens]) or `max_tokens => n`.
    """
    spelling = raw.spelling
    pos = list(raw.positional)
    named = dict(raw.named)
    if not pos:
        raise BindError(f"{spelling} needs a prompt argument", hint=f"e.g. {spelling}(PROMPT('... {{column}} ...'))")
    prompt = pos.pop(0)

    labels: tuple[str, ...] = ()
    max_tokens: int | None = None
    if raw.kind is AIKind.CLASSIFY:
        label_node = named.pop("categories", None) or named.pop("labels", None)
        if label_node is None:
            if not pos:
                raise BindError(f"{spelling} needs a list of labels", hint=f"e.g. {spelling}(prompt, ['yes', 'no'])")
            label_node = pos.pop(0)
        labels = _read_labels(spelling, label_node)
    elif raw.kind is AIKind.GENERATE:
        tokens_node = named.pop("max_tokens", None) or named.pop("max_output_tokens", None)
        if tokens_node is None and pos and not isinstance(pos[0], exp.Struct):
            tokens_node = pos.pop(0)
        max_tokens = DEFAULT_MAX_TOKENS if tokens_node is None else _read_max_tokens(spelling, tokens_node)

    hints: dict[str, Any] = {}
    options_node = named.pop("options", None)
    if options_node is None and pos and isinstance(pos[0], exp.Struct):
        options_node = pos.pop(0)
    if options_node is not None:
        hints = _read_hints(spelling, options_node)
    if pos:
        raise BindError(f"{spelling}: too many arguments ({pos[0].sql(dialect='duckdb')!s} is not expected)")
    if named:
        key = next(iter(named))
        raise BindError(f"{spelling}: unknown argument {key!r}")
    return prompt, CallOptions(labels=labels, max_tokens=max_tokens, hints=hints)


def _read_labels(spelling: str, node: exp.Expression) -> tuple[str, ...]:
    if not isinstance(node, exp.Array):
        raise BindError(
            f"{spelling}: labels must be a list of string literals, got {node.sql(dialect='duckdb')}",
            hint="e.g. ['positive', 'negative']",
        )
    labels: list[str] = []
    for item in node.expressions:
        if not (isinstance(item, exp.Literal) and item.is_string):
            raise BindError(
                f"{spelling}: labels must be string literals, got {item.sql(dialect='duckdb')}",
                hint="e.g. ['positive', 'negative']",
            )
        label = item.this
        if not label.strip():
            raise BindError(f"{spelling}: a label is empty")
        if label in labels:
            raise BindError(f"{spelling}: label {label!r} appears twice")
        labels.append(label)
    if len(labels) < 2:
        raise BindError(f"{spelling}: needs at least two labels, got {len(labels)}")
    return tuple(labels)


def _read_max_tokens(spelling: str, node: exp.Expression) -> int:
    value = _literal_value(node)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_MAX_TOKENS:
        raise BindError(
            f"{spelling}: max_tokens must be an integer between 1 and {MAX_MAX_TOKENS}, got {node.sql(dialect='duckdb')}"
        )
    return value


def _read_hints(spelling: str, node: exp.Expression) -> dict[str, Any]:
    if not isinstance(node, exp.Struct):
        raise BindError(f"{spelling}: options must be a struct literal like {{'selectivity': 0.1}}")
    hints: dict[str, Any] = {}
    for item in node.expressions:
        if not isinstance(item, (exp.PropertyEQ, exp.Slice, exp.Kwarg)):
            raise BindError(f"{spelling}: options must be key: value pairs")
        key = item.this.name.lower()
        if key not in OPTION_KEYS:
            raise BindError(f"{spelling}: unknown option {key!r}", hint=f"known options: {', '.join(sorted(OPTION_KEYS))}")
        value = _literal_value(item.expression)
        if key == "selectivity" and not (isinstance(value, (int, float)) and 0.0 <= float(value) <= 1.0):
            raise BindError(f"{spelling}: option 'selectivity' must be a number between 0 and 1")
        if key == "anchor" and not isinstance(value, str):
            raise BindError(f"{spelling}: option 'anchor' must be a table alias in quotes")
        hints[key] = float(value) if key == "selectivity" else value
    return hints


def _literal_value(node: exp.Expression) -> Any:
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        inner = _literal_value(node.this)
        return -inner if isinstance(inner, (int, float)) else None
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = node.this
        try:
            return int(text)
        except ValueError:
            try:
                return float(text)
            except ValueError:
                return None
    return None
