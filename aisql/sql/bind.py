"""Bind AI calls: validate them, resolve PROMPT templates, and replace each call by a bound call.

After binding, the statement's AST is plain DuckDB SQL except that every AI call reads
`<function_name>(CAST(arg0 AS VARCHAR), ...)`: the arguments are exactly the values that fill the
template, rendered to text by DuckDB. NULL in any of them makes the call NULL without reaching the
model (DuckDB does not call a scalar function on NULL input). How those calls get their answers is
the planner's and executor's business.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from aisql.errors import AisqlError, BindError, TemplateError
from aisql.sql.calls import AICall
from aisql.sql.dialects import dialect_for
from aisql.sql.flockmtl import NOT_YET, RANKING, TARGETS
from aisql.sql.recognize import RawAICall, is_prompt_call, match_ai_call
from aisql.sql.parse import Statement
from aisql.sql.scopes import QueryScopes
from aisql.sql.source import BLANK, SourceText, code_start, node_start
from aisql.sql.template import Placeholder, Template, from_parts, parse_template

VARCHAR = exp.DataType.build("VARCHAR")


@dataclass
class BoundStatement:
    statement: Statement
    ast: exp.Expression  # AI calls replaced by bound calls; equals statement.ast when there are none
    calls: list[AICall]

    @property
    def has_ai(self) -> bool:
        return bool(self.calls)

    def sql(self) -> str:
        """The statement as DuckDB runs it: verbatim when it has no AI calls and is DuckDB's SQL."""
        if self.calls or not self.statement.runs_verbatim:
            return self.ast.sql(dialect="duckdb", comments=False)
        return self.statement.text


def bind_statement(
    statement: Statement, source: SourceText, function_prefix: str, first_call_number: int = 1
) -> BoundStatement:
    """Find, validate and replace the AI calls of one statement (innermost calls first).

    Calls are numbered ai_<first_call_number>, ... in order of appearance, so that ids stay unique
    across the statements of a script.
    """
    _refuse_dynamic_sql(statement, source)
    _refuse_prepared_calls(statement, source)
    ast = statement.ast.copy()
    _copy_meta(statement.ast, ast)
    _lift_dotted_filters(ast)
    raw_calls: list[RawAICall] = []
    for node in ast.walk(bfs=False):  # depth-first: calls are numbered in the order they are written
        try:
            raw = match_ai_call(node)
        except AisqlError as err:
            raise _at(err, source, node) from None
        if raw is not None:
            raw_calls.append(raw)
    _refuse_vectors_as_contents(raw_calls, source)
    _refuse_stored_calls(raw_calls, source)
    ids = {id(raw.node): f"ai_{first_call_number + i}" for i, raw in enumerate(raw_calls)}
    scopes = QueryScopes(ast)
    names = _output_names(ast, {id(raw.node) for raw in raw_calls})
    calls: list[AICall] = []
    # Reverse pre-order visits every call after the calls nested inside its arguments.
    for found in reversed(raw_calls):
        call_id = ids[id(found.node)]
        # Re-read the arguments: calls nested in them have been replaced by bound calls meanwhile.
        raw = match_ai_call(found.node)
        try:
            condition = _aggregate_filter(raw, source)
            call = _bind_call(raw, call_id, f"{function_prefix}{call_id}", source, scopes, condition)
        except AisqlError as err:
            raise _at(err, source, raw.node) from None
        bound = exp.Anonymous(this=call.function_name, expressions=[exp.cast(a.copy(), VARCHAR) for a in call.args])
        bound.meta["written_as"] = raw.spelling  # what the user wrote, for errors that meet the bound call
        _replace_call(raw.node, bound)
        calls.append(call)
    for node in ast.walk():
        if is_prompt_call(node):
            raise BindError(
                "PROMPT(...) can only be used as the prompt argument of an AI function",
                **source.at(node),
                hint="e.g. AI.IF(PROMPT('... {column} ...'))",
            )
    for select, index, name in names:
        projection = select.expressions[index]
        projection.replace(exp.alias_(projection.copy(), name, quoted=True))
    # A call inside an argument that was read and dropped (BigQuery's `embeddings => AI.EMBED(...)`)
    # is not in the statement any more: it never runs.
    present = {node.name.lower() for node in ast.find_all(exp.Anonymous)}
    calls = [c for c in calls if c.function_name.lower() in present]
    calls.sort(key=lambda c: int(c.id.split("_")[1]))
    return BoundStatement(statement=statement, ast=ast, calls=calls)


def _replace_call(node: exp.Expression, bound: exp.Expression) -> None:
    """Put the bound call where the AI call was. BigQuery's generation functions return a STRUCT
    read as `AI.GENERATE(...).result`; aisql's return the result itself, so `.result` is the call
    and `.status` is '' (BigQuery's value on success: a failed call fails the query here)."""
    parent = node.parent
    if isinstance(parent, exp.Dot) and parent.this is node and isinstance(parent.expression, (exp.Identifier, exp.Column)):
        field = parent.expression.name.lower()
        if field == "result":
            parent.replace(bound)
            return
        if field == "status":  # always '' (the call still runs: the row's answer is part of the query)
            parent.replace(exp.Case(ifs=[exp.If(this=exp.Is(this=bound, expression=exp.Null()), true=exp.Literal.string(""))], default=exp.Literal.string("")))
            return
    node.replace(bound)


def _output_names(ast: exp.Expression, call_nodes: set[int]) -> list[tuple[exp.Select, int, str]]:
    """SELECT-list items with an AI call and no alias, with the name of the column as the user
    wrote it: DuckDB would otherwise name it after the bound call (`__aisql_..(CAST(...))`)."""
    named = []
    for select in ast.find_all(exp.Select):
        for index, projection in enumerate(select.expressions):
            if isinstance(projection, (exp.Alias, exp.Star)) or not any(id(n) in call_nodes for n in projection.walk()):
                continue
            named.append((select, index, projection.sql(dialect="duckdb", comments=False)))
    return named


def _lift_dotted_filters(ast: exp.Expression) -> None:
    """sqlglot reads `AI.X(...) FILTER (WHERE c)` as the column `AI."X(...) FILTER (...)"`:
    put the FILTER back around the call `AI.X(...)`, as it reads `AI_X(...) FILTER (...)`."""
    for column in list(ast.find_all(exp.Column)):
        inner = column.this
        if isinstance(inner, exp.Filter) and isinstance(inner.this, exp.Func) and column.table.upper() == "AI" and not column.args.get("db"):
            call = exp.Dot(this=exp.to_identifier(column.table), expression=inner.this.copy())
            column.replace(exp.Filter(this=call, expression=inner.expression.copy()))


def _refuse_repeated_keys(raw: RawAICall) -> None:
    """A struct argument naming a key twice (`{'scale': [1, 5], 'scale': [1, 3]}`): which one was
    meant is unknowable (DuckDB refuses such a struct too), and the option readers, taking the
    first, would call the second unknown."""
    for argument in [*raw.positional, *raw.named.values()]:
        for struct in argument.find_all(exp.Struct):
            seen: set[str] = set()
            for item in struct.expressions:
                if isinstance(item, (exp.PropertyEQ, exp.Slice, exp.Kwarg)):
                    key = item.this.name.lower()
                    if key in seen:
                        raise BindError(f"{raw.spelling}: option {key!r} given twice", hint="keep one of them")
                    seen.add(key)


def _aggregate_filter(raw: RawAICall, source: SourceText) -> exp.Expression | None:
    """`AI_AGG(v, task) FILTER (WHERE cond)`: the condition, the FILTER clause taken off the call
    (the group's values are collected under it: aisql.functions.aggregation). On a scalar AI call
    FILTER is refused by name (DuckDB would say "Scalar Function" about an internal name)."""
    parent = raw.node.parent
    if not (isinstance(parent, exp.Filter) and parent.this is raw.node):
        return None
    if not raw.function.is_aggregate:
        raise BindError(
            f"{raw.spelling} is not an aggregate: FILTER (WHERE ...) applies to aggregates only",
            hint="put the condition in the WHERE clause, or in a CASE WHEN ... THEN ... END around the call",
        )
    where = parent.expression
    condition = where.this if isinstance(where, exp.Where) else where
    parent.replace(raw.node)
    return condition


def _bind_call(
    raw: RawAICall, call_id: str, function_name: str, source: SourceText, scopes: QueryScopes, condition: exp.Expression | None = None
) -> AICall:
    if raw.function.is_aggregate and isinstance(raw.node.parent, exp.Window):
        raise BindError(
            f"{raw.spelling} is an aggregate; OVER (...) is not supported with it",
            hint="aggregate with GROUP BY (or over the whole table) and join the result back if every row needs it",
        )
    _refuse_repeated_keys(raw)
    prompt, options, hints, vendor = raw.function.bind_arguments(raw.spelling, raw.positional, raw.named)
    if condition is not None:
        prompt = raw.function.filtered(prompt, condition)
    line, col = source.position_of(raw.node)
    if raw.function.contents:
        template, args, positions = _bind_contents(raw.spelling, prompt, source)
    elif is_prompt_call(prompt):
        template, args, positions = _bind_prompt(prompt, source, scopes)
    elif isinstance(prompt, exp.Tuple):
        template, args, positions = _bind_prompt_parts(raw.spelling, prompt, source)
    else:
        nested = next((n for n in prompt.walk() if is_prompt_call(n)), None)
        if nested is not None:
            raise BindError(
                f"{raw.spelling}: PROMPT(...) must be the whole prompt argument, not part of an expression",
                line=source.position_of(nested)[0],
                col=source.position_of(nested)[1],
            )
        if isinstance(prompt, exp.Literal) and not prompt.is_string:
            raise BindError(f"{raw.spelling}: the prompt must be text, got the number {prompt.this}")
        if isinstance(prompt, (exp.Array, exp.Struct, exp.Boolean)):
            raise BindError(f"{raw.spelling}: the prompt must be text, got {prompt.sql(dialect='duckdb')}")
        template, args, positions = Template.identity(), (prompt,), (source.position_of(prompt),)
    return AICall(
        id=call_id,
        function_name=function_name,
        function=raw.function,
        spelling=raw.spelling,
        template=template,
        args=args,
        options=options,
        hints=hints,
        line=line,
        col=col,
        arg_positions=positions,
        endpoint=vendor.endpoint,
        notes=vendor.notes,
    )


_PREPARE_HEAD = re.compile(
    rf"^{BLANK}*PREPARE{BLANK}+(?:\"(?:[^\"]|\"\")*\"|[^\s(]+){BLANK}*(?:\([^)]*\))?{BLANK}*AS\b",
    re.IGNORECASE | re.DOTALL,
)
_IMMEDIATE = re.compile(r"\s*IMMEDIATE\b", re.IGNORECASE)
_FLOCKMTL_NAMES = frozenset(TARGETS) | frozenset(RANKING) | frozenset(NOT_YET)


def _refuse_dynamic_sql(statement: Statement, source: SourceText) -> None:
    """BigQuery's EXECUTE IMMEDIATE: a statement built as text at run time, which DuckDB cannot
    run and aisql cannot plan (its AI calls are not known until then)."""
    ast = statement.ast
    if not (isinstance(ast, exp.Command) and ast.name.upper() == "EXECUTE"):
        return
    rest = ast.expression.this if isinstance(ast.expression, exp.Literal) else str(ast.expression or "")
    if not _IMMEDIATE.match(rest):
        return
    line, col = source.line_col(statement.start + code_start(statement.text))
    raise BindError(
        "EXECUTE IMMEDIATE (SQL built as text at run time) is not supported: aisql plans a statement's AI calls before it runs",
        line=line,
        col=col,
        hint="write the statement itself; to give it values, use parameters ($1, ?) with --param 1=VALUE",
    )


def _refuse_prepared_calls(statement: Statement, source: SourceText) -> None:
    """`PREPARE name AS query`: DuckDB keeps the query and runs it at each EXECUTE, where aisql
    neither plans nor answers it — and sqlglot reads the body as an opaque command, so its AI
    calls would go unseen (neither run nor refused). Read the body here and refuse an AI call in
    it, at its own position."""
    ast = statement.ast
    if not (isinstance(ast, exp.Command) and ast.name.upper() == "PREPARE"):
        return
    head = _PREPARE_HEAD.match(statement.text)
    if head is None:
        return  # DuckDB reports what it cannot read
    body = statement.text[head.end():]
    try:
        trees = sqlglot.parse(body, read=dialect_for(statement.dialect))
    except (ParseError, TokenError):
        return
    for tree in trees:
        for node in tree.walk() if tree is not None else ():
            try:
                raw = match_ai_call(node)
                spelling = raw.spelling if raw is not None else None
            except AisqlError:
                spelling = node.sql(dialect="duckdb")[:40]
            if spelling is None and isinstance(node, exp.Anonymous) and node.name.lower() in _FLOCKMTL_NAMES:
                spelling = node.name
            if spelling is None:
                continue
            start = node_start(node)
            line, col = source.line_col(statement.start + head.end() + (start or 0))
            raise BindError(
                f"{spelling} cannot be in a prepared statement: DuckDB runs the prepared query at EXECUTE, where aisql does not answer AI calls",
                line=line,
                col=col,
                hint="run the query itself; to give it values, use parameters ($1, ?) with --param 1=VALUE on the command line or con.run(sql, params=[...]) in Python",
            )


_STORED_KINDS = {"VIEW": "a view", "MACRO": "a macro", "FUNCTION": "a function", "INDEX": "an index", "TYPE": "a type"}


def _refuse_stored_calls(raw_calls: list[RawAICall], source: SourceText) -> None:
    """An AI call is answered while its statement runs; one written into a definition DuckDB
    keeps (a view, a macro, an index, a column's DEFAULT, CHECK or generated value, ALTER TABLE)
    would be called later, outside aisql, where it does not exist: refused here, where it is."""
    for raw in raw_calls:
        where = _stored_in(raw.node)
        if where is None:
            continue
        view = where == "a view"
        raise BindError(
            f"{raw.spelling} cannot be stored in {where}: aisql answers AI calls while a statement runs, not when DuckDB uses a stored definition later",
            **source.at(raw.node),
            hint=(
                "store the answers instead: CREATE TABLE ... AS SELECT ... (or keep the AI call in the queries that read the view)"
                if view
                else "compute the values when rows are written: INSERT INTO ... SELECT ..., AI...(...) or UPDATE ... SET col = AI...(...)"
            ),
        )


def _stored_in(node: exp.Expression) -> str | None:
    """What stored definition an AI call sits in (None: it runs with its statement)."""
    parent = node.parent
    while parent is not None:
        if isinstance(parent, (exp.ColumnDef, exp.ColumnConstraint, exp.CheckColumnConstraint, exp.Schema)):
            return "a column's definition or a table constraint (DEFAULT, CHECK, a generated column)"
        if isinstance(parent, (exp.Alter, exp.AlterColumn)):
            return "a table's definition (ALTER TABLE)"
        if isinstance(parent, exp.Create):
            kind = str(parent.args.get("kind") or "").upper()
            return _STORED_KINDS.get(kind)  # CREATE TABLE ... AS SELECT runs the query now
        parent = parent.parent
    return None


def _refuse_vectors_as_contents(raw_calls: list[RawAICall], source: SourceText) -> None:
    """AI.SIMILARITY(AI.EMBED(a), AI.EMBED(b)): a content is text; an AI.EMBED inside one is a
    vector, and embedding the vector's printed text compares nothing (0.98 for every row)."""
    comparing = {id(raw.node): raw for raw in raw_calls if raw.function.contents}
    for raw in raw_calls:
        if raw.function.name != "EMBED":
            continue
        parent = raw.node.parent
        while parent is not None and id(parent) not in comparing:
            parent = parent.parent
        if parent is not None:
            outer = comparing[id(parent)]
            raise BindError(
                f"{outer.spelling} compares texts; {raw.node.sql(dialect='bigquery')} is a vector",
                **source.at(raw.node),
                hint="pass the texts themselves, or compare vectors with list_cosine_similarity(AI.EMBED(a).result, AI.EMBED(b).result)",
            )


def _bind_contents(spelling: str, contents: exp.Tuple, source: SourceText):
    """The contents a function compares (AI.SIMILARITY's two): each its own value, any text
    expression; no PROMPT templates (each content is embedded as it is)."""
    for item in contents.expressions:
        line, col = source.position_of(item)
        if is_prompt_call(item) or any(is_prompt_call(n) for n in item.walk()):
            raise BindError(f"{spelling}: PROMPT(...) is not a content; pass the text itself", line=line, col=col)
        if (isinstance(item, exp.Literal) and not item.is_string) or isinstance(item, (exp.Array, exp.Struct, exp.Boolean, exp.Tuple)):
            raise BindError(f"{spelling}: a content must be text, got {item.sql(dialect='duckdb')}", line=line, col=col)
    args = tuple(contents.expressions)
    return from_parts([None] * len(args)), args, tuple(source.position_of(a) for a in args)


def _bind_prompt_parts(spelling: str, prompt: exp.Tuple, source: SourceText):
    """BigQuery's prompt of parts, `('Is this positive: ', r.review, '?')`: string literals (or
    arrays of them) are the text, any other expression a value, in the order written."""
    pieces: list[str | None] = []
    args: list[exp.Expression] = []
    positions: list[tuple[int | None, int | None]] = []
    for item in prompt.expressions:
        if isinstance(item, exp.Literal) and item.is_string:
            pieces.append(item.this)
        elif isinstance(item, exp.Array) and all(isinstance(x, exp.Literal) and x.is_string for x in item.expressions):
            pieces.extend(x.this for x in item.expressions)
        elif isinstance(item, (exp.Array, exp.Struct, exp.Tuple)) or (isinstance(item, exp.Literal) and not item.is_string):
            raise BindError(
                f"{spelling}: a prompt part must be a string or a column, got {item.sql(dialect='duckdb')}",
                **source.at(item),
                hint="e.g. ('Is this review positive? ', r.review)",
            )
        else:
            nested = next((n for n in item.walk() if is_prompt_call(n)), None)
            if nested is not None:
                raise BindError(f"{spelling}: PROMPT(...) cannot be part of a prompt tuple", **source.at(nested))
            pieces.append(None)
            args.append(item)
            positions.append(source.position_of(item))
    if not args and not "".join(p for p in pieces if p).strip():
        raise BindError(f"{spelling}: the prompt is empty", **source.at(prompt))
    return from_parts(pieces), tuple(args), tuple(positions)


def _bind_prompt(prompt: exp.Anonymous, source: SourceText, scopes: QueryScopes):
    """PROMPT('text {col} {0}', arg0, ...) -> (Template, argument expressions, their positions)."""
    if not prompt.expressions:
        raise BindError("PROMPT needs a template string", hint="e.g. PROMPT('Is {title} a comedy?')")
    literal, *extra = prompt.expressions
    text = _template_text(literal)
    if text is not None and not text.strip():
        raise TemplateError("the PROMPT template is empty", **source.at(literal), hint="e.g. PROMPT('Is {title} a comedy?')")
    if text is None:
        raise TemplateError(
            f"the PROMPT template must be a string literal, got {literal.sql(dialect='duckdb')}",
            **source.at(literal),
            hint="to build a prompt from an expression, pass the expression itself: AI.IF('Is ' || title || ' a comedy?')",
        )
    try:
        template = parse_template(text)
    except TemplateError as err:
        raise TemplateError(err.message, **source.at(literal), hint=err.hint) from None

    args: list[exp.Expression] = []
    positions: list[tuple[int | None, int | None]] = []
    used_positional: set[int] = set()
    for ph in template.placeholders:
        pos = _placeholder_position(source, literal, ph)
        if ph.is_positional:
            if ph.index >= len(extra):
                raise TemplateError(
                    f"placeholder {{{ph.index}}} has no argument: PROMPT has {len(extra)} argument(s) after the template",
                    line=pos[0],
                    col=pos[1],
                )
            used_positional.add(ph.index)
            args.append(extra[ph.index])
            positions.append(source.position_of(extra[ph.index]))
        else:
            args.append(_placeholder_column(ph, prompt, pos, scopes))
            positions.append(pos)
    unused = [i for i in range(len(extra)) if i not in used_positional]
    if unused:
        raise TemplateError(
            f"PROMPT argument {{{unused[0]}}} is not used by the template {text!r}",
            **source.at(extra[unused[0]]),
        )
    for arg in extra:
        nested = next((n for n in arg.walk() if is_prompt_call(n)), None)
        if nested is not None:
            raise TemplateError("PROMPT(...) cannot be an argument of PROMPT", **source.at(nested))
    return template, tuple(args), tuple(positions)


def _template_text(node: exp.Expression) -> str | None:
    if isinstance(node, exp.Literal) and node.is_string:
        return node.this
    # DuckDB reads "..." as an identifier; PROMPT("...") is a template in double quotes (BigQuery style).
    if isinstance(node, exp.Column) and not node.table and isinstance(node.this, exp.Identifier) and node.this.quoted:
        return node.this.this
    return None


def _placeholder_column(ph: Placeholder, prompt: exp.Expression, pos, scopes: QueryScopes) -> exp.Column:
    """`{alias.col}` / `{table.col}` / `{col}` -> the column reference DuckDB would bind.

    `{col}` and `{q.col}` where `q` names a source of the call's scope or of a scope around it
    are written as they are, so DuckDB resolves them exactly as it would `q.col` written in SQL
    (innermost scope first: an outer reference in a correlated subquery stays outer). Only a
    name DuckDB does not know — the table name of a source given an alias (`{customers.x}` for
    `customers c`) — is rewritten to that alias, innermost scope first."""
    column = exp.to_identifier(ph.column, quoted=True)
    if ph.qualifier is None:
        return exp.Column(this=column)
    chain = scopes.visible_sources(prompt)
    wanted = ph.qualifier.lower()
    for sources in chain:
        for name in sources:
            if name.lower() == wanted:
                return exp.Column(this=column, table=exp.to_identifier(name, quoted=True))
    for sources in chain:
        for name, node in sources.items():
            if isinstance(node, exp.Table) and node.name.lower() == wanted:
                return exp.Column(this=column, table=exp.to_identifier(name, quoted=True))
    available = sorted(chain[0]) if chain else []
    raise TemplateError(
        f"unknown table or alias {ph.qualifier!r} in placeholder {{{ph.text}}}",
        line=pos[0],
        col=pos[1],
        hint=f"tables here: {', '.join(available)}" if available else "the query has no FROM clause here",
    )


def _placeholder_position(source: SourceText, literal: exp.Expression, ph: Placeholder) -> tuple[int | None, int | None]:
    """Line/column of a placeholder's '{' inside the template literal of the user's text."""
    start = node_start(literal)
    if start is None or start >= len(source.text):
        return source.position_of(literal)
    quote = source.text[start]
    if quote not in ("'", '"'):
        return source.line_col(start)
    raw = start + 1
    value_index = 0
    while raw < len(source.text) and value_index < ph.offset:
        if source.text[raw] == quote and source.text.startswith(quote * 2, raw):
            raw += 2
        elif source.text[raw] == quote:
            break
        else:
            raw += 1
        value_index += 1
    return source.line_col(raw)


def _copy_meta(src: exp.Expression, dst: exp.Expression) -> None:
    """Expression.copy() may drop token positions; carry them over so errors can point at text."""
    for a, b in zip(src.walk(), dst.walk()):
        if a.meta and not b.meta:
            b.meta.update(a.meta)


def _at(err: AisqlError, source: SourceText, node: exp.Expression) -> AisqlError:
    """Give an error the position of `node` if it has none yet."""
    if err.line is None:
        err.line, err.col = source.position_of(node)
    return err
