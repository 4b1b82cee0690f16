"""FlockMTL's SQL, as its documentation writes it, read as aisql's own AI functions.

FlockMTL (the DuckDB extension a DuckDB user tries first) spells an AI call with three structs:
the model, the prompt (inline or a named one), the columns passed to it:

    llm_filter({'model_name': 'gpt-4'}, {'prompt': 'Is it eco-friendly?'}, {'description': d})

Here it becomes `AI.IF(PROMPT('Is it eco-friendly?\n\ndescription: {0}', d))` — planned,
deduplicated, cached and checked like every AI call. The columns are rendered after the prompt as
`name: value` lines (FlockMTL serializes them its own way; aisql's rendering is one fixed, exact
function of the row, so planned equals naive). Mapped: `llm_filter` -> AI.IF, `llm_complete` ->
AI.GENERATE, `llm_embedding({'model_name': ...}, {columns})` -> AI.EMBED, `llm_reduce` -> AI_AGG. The model named
is answered by the run's model, said in a note. `CREATE [GLOBAL|LOCAL] PROMPT('name', 'text')`
keeps a named prompt for the rest of the script (`{'prompt_name': 'name'}`); `CREATE MODEL(...)`
is accepted with a note. Not mapped yet (refused with their position): `llm_rerank`,
`llm_first`, `llm_last`, `llm_complete_json`, `llm_reduce_json`, fusion functions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sqlglot import exp

from aisql.errors import BindError

TARGETS = {"llm_filter": "AI.IF", "llm_complete": "AI.GENERATE", "llm_embedding": "AI.EMBED", "llm_reduce": "AI_AGG"}
NOT_YET = ("llm_rerank", "llm_first", "llm_last", "llm_complete_json", "llm_reduce_json", "fusion_relative", "fusion_rrf", "fusion_combsum", "fusion_combmnz", "fusion_combmed", "fusion_combanz")
_RESOURCE = re.compile(r"^\s*(CREATE|UPDATE|DELETE)\s+(?:(?:GLOBAL|LOCAL)\s+)?(PROMPT|MODEL)\s*\((.*)\)\s*;?\s*$", re.IGNORECASE | re.DOTALL)
_STRING = re.compile(r"'((?:[^']|'')*)'")


@dataclass
class FlockResources:
    """What a script's FlockMTL statements declared: named prompts, and the notes they left."""

    prompts: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def take_statement(self, text: str) -> bool:
        """Whether `text` is a FlockMTL resource statement (then it is taken here, not run)."""
        found = _RESOURCE.match(text)
        if not found:
            return False
        verb, kind, body = found.group(1).upper(), found.group(2).upper(), found.group(3)
        values = [v.replace("''", "'") for v in _STRING.findall(body)]
        if kind == "PROMPT" and verb in ("CREATE", "UPDATE") and len(values) >= 2:
            self.prompts[values[0]] = values[1]
        elif kind == "PROMPT" and verb == "DELETE" and values:
            self.prompts.pop(values[0], None)
        elif kind == "MODEL" and values:
            self.notes.append(f"{verb} MODEL {values[0]!r} accepted: aisql answers with the run's model (--model)")
        return True


def translate(ast: exp.Expression, resources: FlockResources, at) -> None:
    """Rewrite FlockMTL calls in `ast` into aisql's AI functions, in place. `at(node)`: a node's
    position, for errors."""
    for call in list(ast.find_all(exp.Anonymous)):
        name = call.name.lower()
        if name in NOT_YET:
            raise BindError(f"FlockMTL's {name} is not supported yet", **at(call), hint="llm_filter, llm_complete, llm_embedding and llm_reduce are")
        if name not in TARGETS:
            continue
        model, prompt, columns = _structs(call, name, at)
        text = "" if name == "llm_embedding" else _prompt_text(prompt, resources, name, at, call)
        replacement = _rewritten(name, text, columns, at, call)
        model_name = model.get("model_name")
        if isinstance(model_name, exp.Literal) and model_name.is_string:
            resources.notes.append(f"{name}: model {model_name.this!r} named in the query; answered by the run's model (--model)")
        replacement.meta.update(call.meta)
        call.replace(replacement)


def _structs(call: exp.Anonymous, name: str, at) -> tuple[dict, dict, list[tuple[str, exp.Expression]]]:
    args = call.expressions
    if len(args) < 2 or not all(isinstance(a, exp.Struct) for a in args):
        raise BindError(
            f"{name} takes structs: ({{'model_name': ...}}, {{'prompt': ...}}[, {{'column': value, ...}}])",
            **at(call),
        )
    if name == "llm_embedding":  # (model, columns): no prompt
        return dict(_pairs(args[0])), {}, _pairs(args[1])
    model, prompt = (_pairs(a) for a in args[:2])
    columns = _pairs(args[2]) if len(args) > 2 else []
    return dict(model), dict(prompt), columns


def _pairs(struct: exp.Struct) -> list[tuple[str, exp.Expression]]:
    """A struct literal's (key, value) pairs, in the order written."""
    return [_pair(item) for item in struct.expressions]


def _pair(item: exp.Expression) -> tuple[str, exp.Expression]:
    if isinstance(item, (exp.PropertyEQ, exp.Slice, exp.EQ)):
        key = item.this
        name = key.name if isinstance(key, (exp.Identifier, exp.Column)) else key.this if isinstance(key, exp.Literal) else key.sql()
        return name, item.expression
    return item.alias_or_name, item


def _prompt_text(prompt: dict, resources: FlockResources, name: str, at, call) -> str:
    inline = prompt.get("prompt")
    if isinstance(inline, exp.Literal) and inline.is_string:
        return inline.this
    named = prompt.get("prompt_name")
    if isinstance(named, exp.Literal) and named.is_string:
        if named.this not in resources.prompts:
            raise BindError(
                f"{name}: no prompt named {named.this!r}", **at(call), hint="declare it earlier in the script: CREATE PROMPT('name', 'text')"
            )
        return resources.prompts[named.this]
    raise BindError(f"{name}: the prompt struct needs 'prompt' (a string) or 'prompt_name'", **at(call))


def _rewritten(name: str, text: str, columns: list[tuple[str, exp.Expression]], at, call) -> exp.Expression:
    target = TARGETS[name]
    if name == "llm_embedding":  # one column as it is; several as 'name: value' lines
        return _call(target, [columns[0][1].copy() if len(columns) == 1 else _rendered_row(columns)])
    if name == "llm_reduce":
        rows = _rendered_row(columns) if columns else exp.Literal.string("")
        return _call(target, [rows, exp.Literal.string(text)])
    escaped = text.replace("{", "{{").replace("}", "}}")
    lines = "\n".join(f"{column}: {{{i}}}" for i, (column, _) in enumerate(columns))
    template = exp.Literal.string(escaped + ("\n\n" + lines if lines else ""))
    prompt = exp.Anonymous(this="PROMPT", expressions=[template] + [value.copy() for _, value in columns])
    return _call(target, [prompt])


def _rendered_row(columns: list[tuple[str, exp.Expression]]) -> exp.Expression:
    """'name: value' lines of one row, as DuckDB renders the values (llm_reduce's input)."""
    parts: list[exp.Expression] = []
    for i, (column, value) in enumerate(columns):
        parts.append(exp.Literal.string(("\n" if i else "") + f"{column}: "))
        parts.append(exp.Cast(this=value.copy(), to=exp.DataType.build("VARCHAR")))
    rendered = parts[0]
    for part in parts[1:]:
        rendered = exp.DPipe(this=rendered, expression=part)
    return rendered


def _call(target: str, args: list[exp.Expression]) -> exp.Expression:
    if "." in target:
        namespace, function = target.split(".")
        return exp.Dot(this=exp.to_identifier(namespace), expression=exp.Anonymous(this=function, expressions=args))
    return exp.Anonymous(this=target, expressions=args)
