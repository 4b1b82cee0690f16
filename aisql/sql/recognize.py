"""Recognise AI function calls in a sqlglot AST, whatever their spelling.

sqlglot parses them into three shapes: a dotted call (`AI.IF(...)`), an anonymous function
(`AI_FILTER(...)`), or one of its own classes (`exp.AIClassify`, ...). `match_ai_call`
normalises all of them to one `RawAICall`; which names mean which function is the registry's
(`aisql.functions`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp

from aisql import functions
from aisql.errors import BindError
from aisql.functions import AIFunction


@dataclass
class RawAICall:
    """An AI call as written: positional and named arguments, not yet validated."""

    node: exp.Expression  # the whole call node in the AST (the Dot for AI.IF)
    function: AIFunction
    spelling: str
    positional: list[exp.Expression]
    named: dict[str, exp.Expression] = field(default_factory=dict)


def match_ai_call(node: exp.Expression) -> RawAICall | None:
    """Recognise an AI function call node; None for anything else. Unknown `AI.X` is an error."""
    if isinstance(node, exp.Dot) and isinstance(node.this, (exp.Identifier, exp.Column)):
        if node.this.name.upper() != "AI" or not isinstance(node.expression, exp.Func):
            return None
        call = node.expression
        name = call.name.upper() if isinstance(call, exp.Anonymous) else call.sql_name().upper()
        spelling = f"AI.{name}"
        function = functions.by_spelling(spelling)
        if function is None:
            raise BindError(f"unknown AI function {spelling}", hint=f"known: {functions.known_spellings()}")
        return _split_args(node, function, spelling, _arguments(call))
    if isinstance(node, exp.Anonymous):
        function = functions.by_spelling(node.name)
        if function is not None:
            return _split_args(node, function, node.name.upper(), list(node.expressions))
        return None
    for function in functions.FUNCTIONS:
        if isinstance(node, function.sqlglot_nodes):
            return _split_args(node, function, node.sql_name().upper(), _arguments(node))
    return None


def is_prompt_call(node: exp.Expression) -> bool:
    return isinstance(node, exp.Anonymous) and node.name.upper() == "PROMPT"


def _arguments(call: exp.Expression) -> list[exp.Expression]:
    """A call's arguments in written order, for sqlglot's own function classes too."""
    if isinstance(call, exp.Anonymous):
        return list(call.expressions)
    out: list[exp.Expression] = []
    for key in call.arg_types:
        value = call.args.get(key)
        if isinstance(value, list):
            out.extend(value)
        elif isinstance(value, exp.Expression):
            out.append(value)
    return out


def _split_args(node: exp.Expression, function: AIFunction, spelling: str, args: list[exp.Expression]) -> RawAICall:
    spelling = node.meta.get("written_as", spelling)  # a call rewritten from another spelling (FlockMTL's llm_filter)
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
    return RawAICall(node=node, function=function, spelling=spelling, positional=positional, named=named)
