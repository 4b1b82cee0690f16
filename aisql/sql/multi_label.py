"""Multi-label classification (Snowflake AI_CLASSIFY's `{'output_mode': 'multi'}`, BigQuery
AI.CLASSIFY's `output_mode => 'multi'`) read as one yes/no question per category.

A multi-label answer is the set of categories that apply, so each category is its own AI.IF over
the same input — written with the input first and the category last, so every category's prompt
shares the input's prefix and the engine computes it once per row (radix KV reuse). The call
becomes

    list_transform([[CASE AI.IF(PROMPT('{0}\n\nDoes this belong to the category "travel"?', x))
                     WHEN TRUE THEN 'travel' WHEN FALSE THEN '' END, ...]],
                   a -> CASE WHEN a[1] IS NULL THEN NULL ELSE list_filter(a, l -> l <> '') END)[1]

— a VARCHAR[] of the categories that apply, in the order written (BigQuery's ARRAY<STRING>;
Snowflake wraps it as `{"labels": [...]}`, aisql returns the plain list as it does for every
function). Each AI.IF is planned, deduplicated and cached like any other, so planned equals
naive. At most MAX_MULTI_LABELS categories: one AI node each.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from aisql.errors import BindError
from aisql.functions import arguments

MAX_MULTI_LABELS = 64
QUESTION = 'Does this belong to the category "{label}"{description}? Answer Yes or No.'


def translate(ast: exp.Expression, at) -> None:
    """Rewrite multi-label classification calls in `ast`, in place."""
    from aisql.functions.ai_classify import read_categories
    from aisql.sql.recognize import match_ai_call

    for node in list(ast.walk()):
        if not isinstance(node, (exp.Dot, exp.Anonymous, exp.AIClassify)):
            continue
        try:
            raw = match_ai_call(node)
        except BindError:  # an unknown AI.X: the binder says so, with its position
            continue
        if raw is None or raw.function.name != "CLASSIFY":
            continue
        positional, named = list(raw.positional), dict(raw.named)
        mode, task, config = _mode(named, positional)
        if mode != "multi":
            continue
        spelling = raw.spelling
        text = named.pop("input", None) or named.pop("prompt", None) or (positional.pop(0) if positional else None)
        labels_node = named.pop("categories", None) or named.pop("labels", None) or (positional.pop(0) if positional else None)
        if text is None or labels_node is None:
            raise BindError(f"{spelling} needs an input and a list of categories", **at(node))
        if config is not None and positional and positional[0] is config:
            positional.pop(0)
        try:
            labels, descriptions = read_categories(spelling, labels_node)
        except BindError as err:
            raise BindError(err.message, hint=err.hint, **at(node)) from None
        if len(labels) > MAX_MULTI_LABELS:
            raise BindError(f"{spelling}: output_mode 'multi' takes at most {MAX_MULTI_LABELS} categories (one yes/no question each), got {len(labels)}", **at(node))
        examples = _examples(spelling, named, config, at(node))
        endpoint = named.pop("endpoint", None)
        for key in ("connection_id",):
            named.pop(key, None)
        if positional or named:
            extra = positional[0].sql(dialect="duckdb") if positional else next(iter(named))
            raise BindError(f"{spelling}: {extra} is not read with output_mode 'multi'", **at(node))
        cases = []
        for label, description in zip(labels, descriptions or [None] * len(labels)):
            question = QUESTION.format(label=label, description=f" ({description})" if description else "")
            if task:
                question = f"{task}\n{question}"
            arguments_ = [_prompt(text, question)] + _endpoint(endpoint) + _category_examples(examples, label)
            call = exp.Dot(this=exp.to_identifier("AI"), expression=exp.Anonymous(this="IF", expressions=arguments_))
            # Named with its category (AI_CLASSIFY['travel']): each category's node is told apart in
            # plans, the summary and warnings, where a long prompt's text is cut before its question.
            call.meta.update(node.meta, written_as=f"{spelling}[{label!r}]")
            # CASE on the call (evaluated once): the label, '' for No, NULL where the input is NULL
            cases.append(exp.Case(this=call, ifs=[exp.If(this=exp.true(), true=exp.Literal.string(label)), exp.If(this=exp.false(), true=exp.Literal.string(""))]))
        replacement = _categories_that_apply(exp.Array(expressions=cases))
        replacement.meta.update(node.meta)
        node.replace(replacement)


def _mode(named: dict, positional: list) -> tuple[str, str | None, exp.Struct | None]:
    """(output mode, task description, Snowflake's config struct if any)."""
    found = {key: named.pop(key) for key in ("output_mode", "task_description") if key in named}
    config = next((p for p in positional[2:] if isinstance(p, exp.Struct)), None)
    if config is not None:
        # the config's scalar keys, read one by one: its examples may hold what constant_value cannot fold
        values = {
            item.this.name.lower(): (arguments.literal_value(item.expression) if item.this.name.lower() != "examples" else None)
            for item in config.expressions
            if isinstance(item, (exp.PropertyEQ, exp.Slice, exp.Kwarg))
        }
        if values:
            for key in ("output_mode", "task_description"):
                if key in values:
                    found[key] = exp.Literal.string(values[key]) if isinstance(values[key], str) else exp.Null()
            unknown = set(values) - {"output_mode", "task_description", "examples"}
            if unknown and str(values.get("output_mode", "")).lower() == "multi":
                raise BindError(f"AI_CLASSIFY: option {sorted(unknown)[0]!r} is not read with output_mode 'multi'")
    mode = arguments.literal_value(found["output_mode"]) if "output_mode" in found else None
    task = arguments.literal_value(found["task_description"]) if "task_description" in found else None
    return (mode.lower() if isinstance(mode, str) else None), task, config


def _examples(spelling: str, named: dict, config: exp.Struct | None, where: dict) -> str | None:
    """The call's labelled examples as one DuckDB query whose `label` is the list of categories
    that apply (BigQuery's `examples =>`, Snowflake's config `examples`), or None."""
    from aisql.functions.ai_classify import snowflake_examples

    given = named.pop("examples", None)
    if config is not None:
        for item in list(config.expressions):
            if isinstance(item, (exp.PropertyEQ, exp.Slice, exp.Kwarg)) and item.this.name.lower() == "examples":
                if given is not None:
                    raise BindError(f"{spelling}: examples given twice (in the config object and as examples =>)", **where)
                given = snowflake_examples(spelling, item.expression, multi=True)
                item.pop()
    if given is None:
        return None
    try:
        return arguments.read_examples(spelling, given)
    except BindError as err:
        raise BindError(err.message, hint=err.hint, **where) from None


def _category_examples(examples: str | None, label: str) -> list[exp.Expression]:
    """A category's question learns from the same examples: its label is whether the category is
    among the example's labels."""
    if examples is None:
        return []
    query = sqlglot.parse_one(
        f"SELECT * EXCLUDE (label), list_contains(CAST(label AS VARCHAR[]), {exp.Literal.string(label).sql(dialect='duckdb')}) AS label "
        f"FROM ({examples}) AS __aisql_multi_examples",
        read="duckdb",
    )
    return [exp.Kwarg(this=exp.var("examples"), expression=exp.Subquery(this=query))]


def _prompt(text: exp.Expression, question: str) -> exp.Expression:
    """The input first, the category's question last: prompts of one row share their prefix."""
    escaped = question.replace("{", "{{").replace("}", "}}")
    if isinstance(text, exp.Anonymous) and text.name.upper() == "PROMPT" and text.expressions and isinstance(text.expressions[0], exp.Literal):
        template = text.expressions[0].this + "\n\n" + escaped
        return exp.Anonymous(this="PROMPT", expressions=[exp.Literal.string(template)] + [a.copy() for a in text.expressions[1:]])
    return exp.Anonymous(this="PROMPT", expressions=[exp.Literal.string("{0}\n\n" + escaped), text.copy()])


def _endpoint(node: exp.Expression | None) -> list[exp.Expression]:
    return [exp.Kwarg(this=exp.var("endpoint"), expression=node.copy())] if node is not None else []


def _categories_that_apply(answers: exp.Array) -> exp.Expression:
    """The categories answered Yes, in the order written — NULL where the input is NULL (every
    category's question reads the same input, so the first answer's NULL is every one's), as an
    AI.IF on NULL is NULL and not "no category applies". The answers are read through a lambda so
    each call appears once."""
    template = sqlglot.parse_one(
        "SELECT list_transform([NULL], a -> CASE WHEN a[1] IS NULL THEN NULL ELSE list_filter(a, l -> l <> '') END)[1]", read="duckdb"
    ).selects[0]
    template.find(exp.Array).set("expressions", [answers])
    return template
