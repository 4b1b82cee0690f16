"""A prompt over the context is the row's fault only where the call's own framing leaves room for
a row (issue 58, cause 13): with 10,000 labels listed for the model every row overflows, and
--on-overflow truncate cut the row's text away entirely; the summary printed all the labels."""

from __future__ import annotations

import pytest

from aisql.executor.answers.evaluate import ContextOverflow

MANY = ", ".join(f"'category number {i}'" for i in range(10_000))
SQL = f"SELECT id, AI.CLASSIFY(PROMPT('Which fits {{0}}?', name), [{MANY}]) AS c FROM products WHERE id <= 3"


@pytest.mark.slow  # seconds each: the full suite runs it, the fast tier keeps its siblings
@pytest.mark.parametrize("on_overflow", ["error", "truncate"])
def test_labels_that_fill_the_context_are_the_calls_error_not_the_rows(make_connection, on_overflow):
    with pytest.raises(ContextOverflow) as err:
        make_connection().run(SQL, on_overflow=on_overflow)
    message = err.value.message
    assert "the call's own instruction takes" in message and "its 10,000 labels" in message and "before any row's text" in message
    assert "Which fits" not in message  # not blamed on a row's values
    assert (err.value.line, err.value.col) == (1, 12)


def test_a_long_row_is_truncated_to_its_own_text_never_to_nothing(make_connection):
    """The sibling: labels that fit, a row that does not: truncation keeps the framing whole and
    at least MIN_ROW_TOKENS of the row, so rows that differ early get different answers' prompts."""
    from aisql.executor.answers.evaluate import MIN_ROW_TOKENS, prepare

    con = make_connection()
    engine = con.session.engine
    call = make_connection().explain(SQL.replace(MANY, ", ".join(f"'category number {i}'" for i in range(600)))).plans[0].nodes[0].call
    task = call.task
    framing = len(engine.encode_prompts(task.framing, [""])[0])
    assert framing + MIN_ROW_TOKENS < engine.info.max_context  # this case's labels fit
    rows = ["apples " * 4000, "pears " * 4000]
    prepared = prepare(engine, task, rows, on_overflow="truncate")
    assert all(p.truncated and len(p.ids) <= engine.info.max_context for p in prepared)
    assert prepared[0].ids != prepared[1].ids  # each still reads its own row


@pytest.mark.slow  # seconds each: the full suite runs it, the fast tier keeps its siblings
def test_plans_and_summaries_count_labels_beyond_the_first_ten(make_connection):
    from aisql.functions.arguments import shown_list

    assert shown_list([f"l{i}" for i in range(12)]) == repr([f"l{i}" for i in range(12)])
    assert shown_list([f"l{i}" for i in range(10_000)]).endswith("'l9', ... and 9,990 more]")
    explained = str(make_connection().explain(SQL))
    assert "... and 9,990 more]" in explained and "category number 9999" not in explained


@pytest.mark.parametrize("on_overflow", ["error", "truncate"])
@pytest.mark.parametrize("call", ["AI.IF(PROMPT('{words} Is {{0}} a gift?', name))", "AI.CLASSIFY(PROMPT('Which fits {{0}}? {words}', name), ['a', 'b'])"])
def test_a_template_whose_own_words_fill_the_context_is_the_calls_error(make_connection, on_overflow, call):
    """The same cause through the PROMPT template: its own words, not the row's values, fill the
    context — every row would overflow, and truncating would cut the row away."""
    sql = f"SELECT id,\n  {call.format(words='gift wrapping paper ' * 3000)} AS c FROM products WHERE id <= 3"
    with pytest.raises(ContextOverflow) as err:
        make_connection().run(sql, on_overflow=on_overflow)
    message = err.value.message
    assert "the PROMPT template's own text takes" in message and "before any row's value" in message
    assert "a prompt of" not in message  # not blamed on a row
    assert (err.value.line, err.value.col) == (2, 3)
