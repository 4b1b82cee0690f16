"""FlockMTL's SQL, as its documentation writes it, read as aisql's own AI functions.

FlockMTL (the DuckDB extension a DuckDB user tries first) spells an AI call with structs: the
model, and the prompt (inline or a named one) with the columns passed to it:

    llm_filter({'model_name': 'gpt-4o'},
               {'prompt': 'Is it eco-friendly?', 'context_columns': [{'data': d, 'name': 'description'}]})

(its older spelling passes the columns as a third struct, `{'description': d}`: read too). Here it
becomes `AI.IF(PROMPT('Is it eco-friendly?\n\ndescription: {0}', d), endpoint => 'gpt-4o')` —
planned, deduplicated, cached and checked like every AI call. The columns are rendered after the
prompt as `name: value` lines (FlockMTL serializes them its own way; aisql's rendering is one
fixed, exact function of the row, so planned equals naive). The model named is a model name like
BigQuery's `endpoint`: answered by the run's model with a note, or chosen with `--model-map`,
refused with `--strict-models`.

Mapped: `llm_filter` -> AI.IF, `llm_complete` -> AI.GENERATE, `llm_embedding` -> AI.EMBED,
`llm_reduce` -> AI_AGG; `llm_first` / `llm_last` / `llm_rerank` -> the group's rows ranked by
AI.SCORE's relevance (1-10) of each row to the prompt: the row of highest / lowest relevance as a
JSON object of its context columns, or all rows as a JSON array, most relevant first (ties by the
row's text). FlockMTL asks its model to rank a window of rows in one prompt (listwise); aisql
scores each row on its own, so a row's answer does not depend on which rows share its group —
deduplicated, cached and equal to naive execution.

Statements: `CREATE|UPDATE [GLOBAL|LOCAL] PROMPT('name', 'text')` keeps a named prompt (each
update a new version; `{'prompt_name': 'name', 'version': 1}` picks one), `DELETE PROMPT 'name'`
drops it; `CREATE|UPDATE|DELETE MODEL(...)`, `UPDATE PROMPT 'name' TO GLOBAL` and FlockMTL's
`CREATE SECRET (TYPE OPENAI|OLLAMA|AZURE_LLM, ...)` are accepted with a note (aisql runs its own
model; a secret is never read). Each returns one row saying what was taken. Not mapped (refused with
their position): `llm_complete_json`, `llm_reduce_json`, the fusion functions, image columns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp

from aisql.errors import BindError
from aisql.sql.source import BLANK, code_start

TARGETS = {"llm_filter": "AI.IF", "llm_complete": "AI.GENERATE", "llm_embedding": "AI.EMBED", "llm_reduce": "AI_AGG"}
RANKING = ("llm_first", "llm_last", "llm_rerank")
NOT_YET = ("llm_complete_json", "llm_reduce_json", "fusion_relative", "fusion_rrf", "fusion_combsum", "fusion_combmnz", "fusion_combmed", "fusion_combanz")
RELEVANCE = "Rate from 1 to 10 how relevant this row is to: {prompt}"
AI_SECRET_TYPES = ("openai", "ollama", "azure_llm", "azure", "anthropic")

_W = BLANK  # blanks between a resource statement's words, comments included
_RESOURCE = re.compile(
    rf"^{_W}*(CREATE|UPDATE|DELETE){_W}+(?:(?:GLOBAL|LOCAL){_W}+)?(PROMPT|MODEL){_W}*\((.*)\){_W}*;?{_W}*$", re.IGNORECASE | re.DOTALL
)
_BARE = re.compile(
    rf"^{_W}*(DELETE|UPDATE|GET){_W}+(PROMPTS?|MODELS?)\b{_W}*('(?:[^']|'')*')?({_W}+TO{_W}+(?:GLOBAL|LOCAL))?{_W}*;?{_W}*$", re.IGNORECASE | re.DOTALL
)
_SECRET = re.compile(
    rf"^{_W}*CREATE{_W}+(?:OR{_W}+REPLACE{_W}+)?(?:(?:PERSISTENT|TEMPORARY){_W}+)?SECRET\b(?:{_W}+IF{_W}+NOT{_W}+EXISTS)?"
    rf"(?:{_W}*\"(?:[^\"]|\"\")*\"|{_W}+\w+)?{_W}*\({_W}*TYPE{_W}+'?(\w+)'?",
    re.IGNORECASE | re.DOTALL,
)
_STRING = re.compile(r"'((?:[^']|'')*)'")


@dataclass
class FlockResources:
    """What FlockMTL statements declared: named prompts (their versions), and the notes they left.
    A connection keeps one across its statements (the shell's named prompts)."""

    prompts: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def take_statement(self, text: str) -> str | None:
        """What `text` did, if it is a FlockMTL resource statement (taken here, not run); None
        for any other statement."""
        text = text[code_start(text):]
        secret = _SECRET.match(text)
        if secret and secret.group(1).lower() in AI_SECRET_TYPES:
            self.notes.append(f"CREATE SECRET (TYPE {secret.group(1).upper()}) ignored: aisql runs its own model and reads no key")
            return f"secret of type {secret.group(1).upper()} ignored"
        found = _RESOURCE.match(text)
        if found:
            kind = found.group(2).upper()
            values = _text_arguments(found.group(3), f"{found.group(1).upper()} {kind}") if kind == "PROMPT" else [v.replace("''", "'") for v in _STRING.findall(found.group(3))]
            return self._take(found.group(1).upper(), kind, values)
        bare = _BARE.match(text)
        if bare:
            name = [bare.group(3)[1:-1].replace("''", "'")] if bare.group(3) else []
            if bare.group(1).upper() == "UPDATE" and not bare.group(4):
                return None
            return self._take(bare.group(1).upper(), bare.group(2).upper().rstrip("S"), name, scope=bool(bare.group(4)))
        return None

    def _take(self, verb: str, kind: str, values: list[str], scope: bool = False) -> str:
        if kind == "PROMPT":
            if verb == "GET":
                if not values:
                    return ", ".join(f"{name} (version {len(v)})" for name, v in self.prompts.items())
                if values[0] not in self.prompts:
                    raise BindError(f"GET PROMPT: no prompt named {values[0]!r}", hint="declare it first: CREATE PROMPT('name', 'text')")
                return self.prompt(values[0], None)
            if scope:
                return f"prompt {values[0]!r}: GLOBAL/LOCAL has no meaning here (prompts live for the connection)"
            if verb in ("CREATE", "UPDATE") and len(values) >= 2:
                versions = self.prompts.setdefault(values[0], [])
                if not versions or versions[-1] != values[1] or verb == "CREATE":
                    versions[:] = [values[1]] if verb == "CREATE" else versions + [values[1]]
                return f"prompt {values[0]!r} version {len(versions)}"
            if verb == "DELETE" and values:
                self.prompts.pop(values[0], None)
                return f"prompt {values[0]!r} deleted"
            raise BindError(f"{verb} PROMPT needs a name and a text: {verb} PROMPT('name', 'text')")
        label = repr(values[0]) if values else ""
        self.notes.append(f"{verb} MODEL {label} accepted: aisql answers with the run's model (--model; --model-map NAME=MODEL to choose)".replace("  ", " "))
        return f"model {label} noted".replace("  ", " ")

    def prompt(self, name: str, version: int | None) -> str:
        versions = self.prompts[name]
        if version is None:
            return versions[-1]
        if not 1 <= version <= len(versions):
            raise KeyError(version)
        return versions[version - 1]


def _text_arguments(inner: str, statement: str) -> list[str]:
    """The values of `'name', 'text'` as DuckDB would read them: each argument a string literal
    or a concatenation of them ('a' || 'b'); anything else refused rather than half-read."""
    try:
        parsed = sqlglot.parse_one(f"SELECT {inner}", read="duckdb")
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError):
        parsed = None
    if not isinstance(parsed, exp.Select):
        raise BindError(f"{statement}: cannot read its arguments ({inner.strip()[:60]})", hint=f"{statement}('name', 'text')")
    return [_constant_text(argument, statement) for argument in parsed.expressions]


def _constant_text(node: exp.Expression, statement: str) -> str:
    if (isinstance(node, exp.Literal) and node.is_string) or isinstance(node, (exp.RawString, exp.ByteString)):
        return node.this  # '...', $$...$$ and DuckDB's E'...' (escapes already read) are all text
    if isinstance(node, exp.DPipe):
        return _constant_text(node.this, statement) + _constant_text(node.expression, statement)
    if isinstance(node, exp.Paren):
        return _constant_text(node.this, statement)
    raise BindError(
        f"{statement}: its arguments are text in quotes, got {node.sql(dialect='duckdb')[:60]}",
        hint=f"{statement}('name', 'text') — 'a' || 'b' is read as 'ab'; a column or a function is not read",
    )


def is_resource(text: str) -> bool:
    """Is `text` one of FlockMTL's resource statements (no side effect)?"""
    text = text[code_start(text):]
    secret = _SECRET.match(text)
    if secret:
        return secret.group(1).lower() in AI_SECRET_TYPES
    bare = _BARE.match(text)
    return bool(_RESOURCE.match(text) or (bare and not (bare.group(1).upper() == "UPDATE" and not bare.group(4))))


def translate(ast: exp.Expression, resources: FlockResources, at) -> None:
    """Rewrite FlockMTL calls in `ast` into aisql's AI functions, in place. `at(node)`: a node's
    position, for errors."""
    for call in list(ast.find_all(exp.Anonymous)):
        name = call.name.lower()
        if name in NOT_YET:
            raise BindError(f"FlockMTL's {name} is not supported yet", **at(call), hint="llm_filter, llm_complete, llm_embedding, llm_reduce, llm_first, llm_last and llm_rerank are")
        if name not in TARGETS and name not in RANKING:
            continue
        model, prompt, columns = _structs(call, name, at)
        text = "" if name == "llm_embedding" else _prompt_text(prompt, resources, name, at, call)
        model_name = model.get("model_name")
        named = model_name.this if isinstance(model_name, exp.Literal) and model_name.is_string else None
        if name == "llm_embedding":
            replacement = _call("AI.EMBED", [_embedded_text(columns)])
            if named:
                resources.notes.append(f"llm_embedding: embedding model {named!r} named in the query; answered by the run's embedding model (--embed-model)")
        elif name in RANKING:
            replacement = _ranking(name, text, columns, named, at, call)
        else:
            replacement = _rewritten(name, text, columns, named, at, call)
        replacement.meta.update(call.meta)
        for node in replacement.walk():  # notes and errors name the call as the query wrote it
            if isinstance(node, exp.Dot) or (isinstance(node, exp.Anonymous) and node.name.upper() == "AI_AGG"):
                node.meta.update(call.meta, written_as=name)
        call.replace(replacement)


def _structs(call: exp.Anonymous, name: str, at) -> tuple[dict, dict, list[tuple[str, exp.Expression]]]:
    """(model struct, prompt struct, [(column name, value)]) from either of FlockMTL's spellings."""
    args = call.expressions
    if len(args) < 2 or not all(isinstance(a, exp.Struct) for a in args):
        raise BindError(
            f"{name} takes structs: ({{'model_name': ...}}, {{'prompt': ..., 'context_columns': [{{'data': column}}, ...]}})",
            **at(call),
        )
    model = dict(_pairs(args[0]))
    second = dict(_pairs(args[1]))
    if "context_columns" in second:
        return model, second, _context_columns(second["context_columns"], name, at, call)
    if name == "llm_embedding":  # the older (model, {column: value}) spelling: no prompt
        return model, {}, _pairs(args[1])
    return model, second, _pairs(args[2]) if len(args) > 2 else []


def _context_columns(node: exp.Expression, name: str, at, call) -> list[tuple[str, exp.Expression]]:
    if not isinstance(node, exp.Array) or not all(isinstance(c, exp.Struct) for c in node.expressions):
        raise BindError(f"{name}: context_columns must be a list of structs, e.g. [{{'data': column, 'name': 'title'}}]", **at(call))
    columns = []
    for struct in node.expressions:
        entry = dict(_pairs(struct))
        if "data" not in entry:
            raise BindError(f"{name}: each context column needs 'data' (the column's value)", **at(call))
        kind = entry.get("type")
        if isinstance(kind, exp.Literal) and kind.this.lower() == "image":
            raise BindError(f"{name}: image context columns are not supported (aisql's models read text)", **at(call))
        label = entry.get("name")
        data = entry["data"]
        column = label.this if isinstance(label, exp.Literal) else data.alias_or_name or data.sql(dialect="duckdb")
        columns.append((column, data))
    return columns


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
                f"{name}: no prompt named {named.this!r}", **at(call), hint="declare it earlier: CREATE PROMPT('name', 'text')"
            )
        version = prompt.get("version")
        number = int(version.this) if isinstance(version, exp.Literal) and not version.is_string and version.this.isdigit() else None
        if version is not None and number is None:
            raise BindError(f"{name}: version must be a whole number, got {version.sql(dialect='duckdb')}", **at(call))
        try:
            return resources.prompt(named.this, number)
        except KeyError:
            have = len(resources.prompts[named.this])
            raise BindError(f"{name}: prompt {named.this!r} has no version {number} (it has {have})", **at(call)) from None
    raise BindError(f"{name}: the prompt struct needs 'prompt' (a string) or 'prompt_name'", **at(call))


def _prompt(text: str, columns: list[tuple[str, exp.Expression]]) -> exp.Expression:
    """PROMPT('<text>\n\nname: {0}\n...', values...): the prompt, then the row's columns."""
    escaped = text.replace("{", "{{").replace("}", "}}")
    # A column's name is text too: '{x}' in a name is shown as written, never a placeholder.
    lines = "\n".join(f"{column.replace('{', '{{').replace('}', '}}')}: {{{i}}}" for i, (column, _) in enumerate(columns))
    template = exp.Literal.string(escaped + ("\n\n" + lines if lines else ""))
    return exp.Anonymous(this="PROMPT", expressions=[template] + [value.copy() for _, value in columns])


def _endpoint(named: str | None) -> list[exp.Expression]:
    return [exp.Kwarg(this=exp.var("endpoint"), expression=exp.Literal.string(named))] if named else []


def _rewritten(name: str, text: str, columns, named: str | None, at, call) -> exp.Expression:
    target = TARGETS[name]
    if name == "llm_reduce":
        rows = _rendered_row(columns) if columns else exp.Literal.string("")
        return _call(target, [rows, exp.Literal.string(text)] + _endpoint(named))
    return _call(target, [_prompt(text, columns)] + _endpoint(named))


def _embedded_text(columns) -> exp.Expression:
    """One column as it is; several as 'name: value' lines."""
    return columns[0][1].copy() if len(columns) == 1 else _rendered_row(columns)


def _ranking(name: str, text: str, columns, named: str | None, at, call) -> exp.Expression:
    """llm_first / llm_last / llm_rerank as DuckDB aggregates over each row's AI.SCORE relevance:
    arg_max / arg_min of the row's JSON object keyed by (relevance, its text) — deterministic on
    ties — or the rows' list ordered by relevance, as JSON."""
    if not columns:
        raise BindError(f"{name} needs context_columns: the rows' values to rank", **at(call))
    score = _call("AI.SCORE", [_prompt(RELEVANCE.format(prompt=text), columns), _scale()] + _endpoint(named))
    row = exp.Anonymous(this="json_object", expressions=[e for column, value in columns for e in (exp.Literal.string(column), value.copy())])
    if name == "llm_rerank":
        ordered = exp.Order(expressions=[exp.Ordered(this=score, desc=True), exp.Ordered(this=exp.Cast(this=row.copy(), to=exp.DataType.build("VARCHAR")))])
        listed = exp.Anonymous(this="list", expressions=[exp.Order(this=row, expressions=ordered.expressions)])
        return exp.Anonymous(this="to_json", expressions=[listed])
    key = exp.Anonymous(this="struct_pack", expressions=[
        exp.PropertyEQ(this=exp.to_identifier("relevance"), expression=score),
        exp.PropertyEQ(this=exp.to_identifier("row"), expression=exp.Cast(this=row.copy(), to=exp.DataType.build("VARCHAR"))),
    ])
    return exp.Anonymous(this="arg_max" if name == "llm_first" else "arg_min", expressions=[row, _scored_only(key)])


def _scored_only(key: exp.Expression) -> exp.Expression:
    """The ranking key, NULL where the row has no relevance (a NULL input is never scored):
    arg_max / arg_min skip a NULL key, but a struct whose relevance is NULL is not NULL and sorts
    above every number, so an unscored row would be llm_first's answer. The key is written once
    (filtered through a one-element list) so its AI call is asked once per row."""
    kept = sqlglot.parse_one("list_filter([__key__], lambda k: k.relevance IS NOT NULL)[1]", read="duckdb")
    return kept.transform(lambda node: key if isinstance(node, exp.Column) and node.name == "__key__" else node)


def _scale() -> exp.Expression:
    return exp.Struct(expressions=[exp.PropertyEQ(this=exp.to_identifier("scale"), expression=exp.Array(expressions=[exp.Literal.number(1), exp.Literal.number(10)]))])


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
