"""A node's decision rule at run time (aisql.functions.decision): its labelled examples and
content-free inputs asked of the model like any prompt of the call — same task, result cache,
checkpoints; one prompt per engine call in naive mode — and the rule fitted on their label
probabilities, with a report of what it did for the run summary.

Examples come from the call's `examples => ...` query, whose columns are named like the prompt's
arguments (`{review}` -> `review`) plus `label`; values are cast to text by DuckDB exactly as
the prompt's arguments are, so an example renders the text a row with the same values would.
Batch calibration needs the node's own answers first: `batch_rule` fits it after the prefetch.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import duckdb
from sqlglot import exp

from aisql.errors import AisqlError
from aisql.executor.store.answer_store import Answer
from aisql.functions import Task
from aisql.functions.arguments import LITERAL_EXAMPLES
from aisql.functions.decision import CONTENT_FREE_INPUTS, MAX_EXAMPLES, Decision
from aisql.sql.calls import AICall

# Asks the model for texts under a task: text -> its answer (label log-probabilities, and the
# hidden state where the task keeps it), with the work counted by the caller (planned: through
# the answering path; naive: one text per engine call).
AskTexts = Callable[[Task, list[str]], dict[str, Answer]]

# The rule of a node whose rule is still being made: the likeliest label, with every label's
# probability required (an older cache entry without them is asked again). Examples: example_rule.
PENDING = {source: Decision(source) for source in ("content_free", "batch")}


class ExamplesError(AisqlError):
    """A call's labelled examples cannot be read or used."""


def source_of(call: AICall) -> str | None:
    """What sets the call's rule at run time: 'examples', 'content_free', 'batch' or None."""
    if "examples" in call.hints:
        return "examples"
    return call.hints.get("calibration")


def read_examples(con: duckdb.DuckDBPyConnection, call: AICall, task: Task) -> tuple[list[tuple[str, ...]], list[Any]]:
    """The examples' argument tuples (as text, as DuckDB casts them) and their labels."""
    sql = call.hints["examples"]
    literal = sql.startswith(LITERAL_EXAMPLES)
    try:
        relation = con.sql(sql)
        columns = relation.columns
    except duckdb.Error as err:
        hint = "every example struct needs the same keys, each of one type (e.g. every label TRUE/FALSE)" if literal else None
        raise ExamplesError(f"examples: {str(err).splitlines()[0]}", hint=hint) from None
    chosen = _columns_for(call, columns)
    casts = ", ".join(f"CAST({_quote(c)} AS VARCHAR)" for c in chosen)
    label = next(c for c in columns if c.lower() == "label")
    try:
        rows = con.sql(f"SELECT {casts}, {_quote(label)} FROM ({sql}) AS __aisql_examples LIMIT {MAX_EXAMPLES + 1}").fetchall()
    except duckdb.Error as err:
        raise ExamplesError(f"examples: {str(err).splitlines()[0]}") from None
    if len(rows) > MAX_EXAMPLES:
        raise ExamplesError(f"examples: more than {MAX_EXAMPLES:,} rows", hint="a few dozen labelled rows are plenty: add LIMIT or sample them")
    if not rows:
        raise ExamplesError("examples: the query returned no rows")
    tuples, labels = [], []
    for number, row in enumerate(rows, 1):
        *values, value = row
        if any(v is None for v in values) or value is None:
            raise ExamplesError(f"examples: row {number} has a NULL", hint="leave rows with NULLs out of the examples (WHERE ... IS NOT NULL)")
        try:
            labels.append(call.function.example_label(task, value))
        except ValueError as err:
            raise ExamplesError(f"examples: row {number}: {err}") from None
        tuples.append(tuple(values))
    return tuples, labels


def _columns_for(call: AICall, columns: list[str]) -> list[str]:
    """The examples' columns that fill the prompt's arguments: by the arguments' column names;
    else in order beside `label` where that cannot swap two of them (one argument, or arguments
    that are not columns)."""
    by_name = {c.lower(): c for c in columns}
    names = [arg.name.lower() if isinstance(arg, exp.Column) else None for arg in call.args]
    if "label" in names:
        raise ExamplesError(
            "examples: the prompt reads a column named label, the name the examples keep for their answers",
            hint="rename that column where the query reads it (e.g. SELECT label AS review_text ...) and in the examples",
        )
    if "label" not in by_name:
        raise ExamplesError(f"examples: no column named label (columns: {', '.join(columns)})", hint="name the examples' answer column label")
    if names and all(n is not None and n in by_name for n in names):
        return [by_name[n] for n in names]
    others = [c for c in columns if c.lower() != "label"]
    # by position: one argument and one column (BigQuery's (input, label) pairs), or arguments without names
    if len(others) == call.arity and (call.arity == 1 or any(n is None for n in names)):
        return others
    wanted = ", ".join(n if n is not None else f"<argument {i + 1}>" for i, n in enumerate(names))
    raise ExamplesError(
        f"examples: columns {', '.join(columns)} do not match the prompt's arguments ({wanted}) plus label",
        hint="select the columns named as the prompt's placeholders, and label",
    )


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclasses.dataclass(frozen=True)
class Examples:
    """A call's labelled examples as its rule was chosen from them: what an AI join's strategies
    are judged against (aisql.executor.joins.join_answers)."""

    tuples: list[tuple[str, ...]]  # the prompt's arguments, as text
    labels: list
    held_out: list  # the chosen rule's answers to them, each held out of its fit


def example_rule(
    con: duckdb.DuckDBPyConnection, call: AICall, task: Task, ask: AskTexts, *, reads_states: bool = False
) -> tuple[Decision | None, dict, Examples]:
    """The rule the call's examples support, and the report of it. `reads_states`: the engine
    returns hidden states, so the examples' states are asked for (a probe may be fitted on them)
    and the rule keeps every prompt's state (Decision.keep_states) — other examples later ask the
    model nothing. None: the function's own answers, nothing kept."""
    tuples, labels = read_examples(con, call, task)
    texts = [call.template.render(values) for values in tuples]
    fitting = Decision("examples", keep_states=reads_states, fitting=True)
    answers = ask(dataclasses.replace(task, decision=fitting), list(dict.fromkeys(texts)))
    rows = [answers[t].logprobs for t in texts]
    states = [answers[t].state for t in texts] if reads_states else None
    from aisql.functions import learning

    try:
        choice = learning.choose(call.function, task, rows, labels, states)
    except ValueError as err:
        raise ExamplesError(f"examples: {err}", hint="give labelled rows of every answer the model should tell apart") from None
    rule, report = choice.rule, choice.report
    report["per_label"] = _per_label(labels)
    if reads_states:  # every prompt of the call keeps its state, whichever rule answers
        rule = dataclasses.replace(rule or Decision("examples"), keep_states=True)
    return rule, report, Examples(tuples, labels, choice.held_out)


def explain_examples(con: duckdb.DuckDBPyConnection, call: AICall, task: Task, lookup: Callable[[Task, list[str]], dict[str, Answer]], *, reads_states: bool) -> dict:
    """What `aisql explain` can say of a call's examples without asking the model: the rule they
    choose and every candidate's quality (the report `example_rule` makes) where every example
    is in the result cache (`lookup`: the cached answers of texts under a task), else how many
    are still to ask. Raises ExamplesError when the examples cannot be read."""
    tuples, labels = read_examples(con, call, task)
    texts = [call.template.render(values) for values in tuples]
    fitting = Decision("examples", keep_states=reads_states, fitting=True)
    found = lookup(dataclasses.replace(task, decision=fitting), list(dict.fromkeys(texts)))
    missing = len(set(texts) - set(found))
    if missing:
        return {"examples": len(texts), "per_label": _per_label(labels), "missing": missing}
    _, report, _ = example_rule(con, call, task, lambda _task, _texts: found, reads_states=reads_states)
    return report


def _per_label(labels: list) -> dict:
    counts: dict[str, int] = {}
    for label in labels:
        key = str(label).lower() if isinstance(label, bool) else str(label)
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def content_free_rule(call: AICall, task: Task, ask: AskTexts) -> tuple[Decision, dict]:
    """Content-free calibration: the prompt with every argument "N/A", "", "[MASK]" in turn."""
    texts = list(dict.fromkeys(call.template.render([cf] * call.arity) for cf in CONTENT_FREE_INPUTS))
    answers = ask(dataclasses.replace(task, decision=PENDING["content_free"]), texts)
    rule = call.function.calibrated(task, [answers[t].logprobs for t in texts], "content_free")
    return rule, {"inputs": len(texts), "rule": rule.describe()}


def batch_rule(call: AICall, task: Task, rows: list[Sequence[float]]) -> tuple[Decision | None, dict]:
    """Batch calibration over the node's distinct prompts' label log-probabilities."""
    if not rows:
        return None, {"inputs": 0, "rule": "the likeliest label (no prompt to calibrate on)"}
    rule = call.function.calibrated(task, rows, "batch")
    return rule, {"inputs": len(rows), "rule": rule.describe()}
