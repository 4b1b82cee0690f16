"""BigQuery and Snowflake queries as their vendors document them: dialects, prompts of parts,
named arguments, AI.SCORE and typed generation."""

from __future__ import annotations

import math

import pytest

import aisql
from aisql.engine.decoding.constrained import GRAMMARS, constraint_for
from aisql.errors import AisqlError, BindError
from aisql.functions.ai_score import AmbiguousScale, scale_in_text


@pytest.fixture
def bq(tiny_engine):
    con = aisql.Connection(engine=tiny_engine, cache=False, dialect="bigquery")
    con.duckdb.execute("CREATE SCHEMA shop")
    con.duckdb.execute(
        "CREATE TABLE shop.reviews AS SELECT * FROM (VALUES (1, 'Great tent, dry all night.'), (2, 'The kettle leaks.'), "
        "(3, 'Loud grinder, 2 settings.')) v(id, review)"
    )
    yield con
    con.close()


def test_bigquery_dialect_reads_vendor_sql_and_runs_it_in_duckdb(bq):
    sql = '''SELECT id, CAST(id AS FLOAT64) AS f, AI.IF(("""Is this positive? """, review)) AS ok
             FROM `shop.reviews` ORDER BY id'''
    rows = bq.run(sql).table.to_pylist()
    assert [r["f"] for r in rows] == [1.0, 2.0, 3.0] and all(isinstance(r["ok"], bool) for r in rows)
    # sqlglot's own BigQuery parser reads AI.IF( as SQL's IF (three arguments): here it is the AI call.
    assert bq.explain(sql).plans[0].nodes[0].call.spelling == "AI.IF"


def test_prompt_of_parts_renders_like_the_concatenation(bq, tiny_engine):
    parts = bq.run("SELECT AI.GENERATE(('Say: ', review, ' [', id, ']'), max_tokens => 3) AS g FROM shop.reviews ORDER BY id")
    joined = bq.run("SELECT AI.GENERATE('Say: ' || review || ' [' || CAST(id AS STRING) || ']', max_tokens => 3) AS g FROM shop.reviews ORDER BY id")
    assert parts.table.to_pylist() == joined.table.to_pylist()
    node = bq.explain("SELECT AI.IF(prompt => ('Is it loud? ', review)) FROM shop.reviews").plans[0].nodes[0]
    assert node.call.template.static_prefix == "Is it loud? "  # the literal head is the shared prefix


def test_vendor_arguments_noted_or_refused(bq):
    sql = """SELECT id FROM shop.reviews WHERE AI.IF(('Positive? ', review), connection_id => 'us.conn',
             model_params => JSON '{"labels": {"q": "x"}, "generation_config": {"temperature": 0, "thinking_config": {"thinking_budget": 0}}}')"""
    notes = bq.run(sql).stats.notes
    assert any("connection_id ignored" in n for n in notes)
    assert any("model_params.labels ignored" in n for n in notes)
    assert any("thinking_config ignored" in n for n in notes)
    assert not any("temperature" in n for n in notes)  # 0 is what aisql does
    with pytest.raises(BindError, match="unknown argument 'colour'"):
        bq.run("SELECT AI.IF(('x', review), colour => 'red') FROM shop.reviews")
    with pytest.raises(BindError, match="model_params is not valid JSON"):
        bq.run("SELECT AI.IF(('x', review), model_params => JSON '{oops') FROM shop.reviews")
    deep = '{"a":' * 100_000 + "1" + "}" * 100_000  # used to be an internal RecursionError
    with pytest.raises(BindError, match="model_params is nested too deeply"):
        bq.run(f"SELECT AI.IF(('x', review), model_params => JSON '{deep}') FROM shop.reviews")
    many = "{" + ",".join(f'"k{i}": 1' for i in range(20_000)) + "}"  # used to be 20,000 note lines
    notes = bq.run(f"SELECT id FROM shop.reviews WHERE AI.IF(('x', review), model_params => JSON '{many}')").stats.notes
    (line,) = [n for n in notes if "model_params" in n]
    assert "model_params.k0" in line and "and 19995 more ignored" in line
    # a vendor's model name: the run's model answers, and says so (--strict-models refuses)
    ported = bq.run("SELECT AI.IF(('x', review), endpoint => 'gemini-2.5-flash') FROM shop.reviews")
    assert ported.table.num_rows == 3
    assert "AI.IF: the model 'gemini-2.5-flash' named in the query is answered by this run's model (tiny); --model-map gemini-2.5-flash=MODEL chooses another, --strict-models refuses" in ported.stats.notes
    with pytest.raises(AisqlError, match="'gemini-2.5-flash' named in the query is not this run's model") as info:
        bq.run("SELECT AI.IF(('x', review), endpoint => 'gemini-2.5-flash') FROM shop.reviews", strict_models=True)
    assert info.value.line == 1
    assert bq.run("SELECT AI.IF(('x', review), endpoint => 'tiny') FROM shop.reviews").table.num_rows == 3


def test_max_output_tokens_reaches_generation(bq):
    result = bq.run(
        """SELECT AI.GENERATE(('Describe: ', review), model_params => JSON '{"generation_config": {"max_output_tokens": 2}}').result AS g
           FROM shop.reviews"""
    )
    assert result.stats.totals()["generated_tokens"] <= 3 * 3  # 2 tokens (+ a stop) per row at most
    assert result.table.column_names == ["g"]


def test_snowflake_spellings(tiny_engine):
    con = aisql.Connection(engine=tiny_engine, cache=False, dialect="snowflake")
    con.duckdb.execute("CREATE TABLE t AS SELECT * FROM (VALUES ('a tent'), ('a kettle')) v(x)")
    rows = con.run("SELECT AI_FILTER(PROMPT('Is {0} for camping?', x)) AS f, AI_CLASSIFY(x, ['outdoor', 'kitchen']) AS c FROM t").table
    assert rows.num_rows == 2
    # AI_COMPLETE(model, prompt [, model_parameters]): the model first, as Snowflake documents it.
    first = con.run("SELECT AI_COMPLETE('tiny', 'Say hi to ' || x, {'max_tokens': 3}) AS g FROM t").table.to_pylist()
    same = con.run("SELECT AI_COMPLETE('Say hi to ' || x, 3) AS g FROM t").table.to_pylist()
    assert first == same
    # Snowflake's documented model names port: answered by the run's model, said in a note
    ported = con.run("SELECT AI_COMPLETE('claude-4', 'Say hi to ' || x, {'max_tokens': 3}) AS g FROM t")
    assert ported.table.to_pylist() == first and any("'claude-4' named in the query" in n for n in ported.stats.notes)
    with pytest.raises(AisqlError, match="'claude-4' named in the query is not this run's model"):
        con.run("SELECT AI_COMPLETE('claude-4', x) FROM t", strict_models=True)


def test_unknown_dialect_is_a_clear_error():
    with pytest.raises(AisqlError, match="unknown SQL dialect 'oracle'"):
        aisql.Connection(dialect="oracle")


# ---- AI.SCORE ----------------------------------------------------------------------------------


def test_score_scale_from_the_prompt_or_an_option():
    assert scale_in_text("Score from 1 to 5 how much ...") == (1, 5)
    assert scale_in_text("Rate it 0 to 10.") == (0, 10)
    assert scale_in_text("no numbers here") is None
    # the first "N to M" used to win: 18..65 here, with no word on the run
    assert scale_in_text("For ages 18 to 65, rate from 1 to 5") == (1, 5)
    assert scale_in_text("Rate from 1 to 5. Use 1 to 2 for bad ones") == (1, 5)
    with pytest.raises(AmbiguousScale):
        scale_in_text("On a scale of 1 to 10 rate people aged 18 to 65")


def test_a_scale_read_from_the_prompt_is_said_and_an_ambiguous_one_refused(tiny_engine):
    con = aisql.Connection(engine=tiny_engine, cache=False)
    notes = con.run("SELECT AI.SCORE('For ages 18 to 65, rate from 1 to 5 this plan') AS s").stats.notes
    assert any("scale 1 to 5 read from the prompt" in n for n in notes)
    with pytest.raises(BindError, match="several ranges .*which is the scale"):
        con.run("SELECT AI.SCORE('On a scale of 1 to 10 rate people aged 18 to 65') AS s")
    assert not any("read from the prompt" in n for n in con.run("SELECT AI.SCORE('x', {'scale': [1, 3]}) AS s").stats.notes)


def test_score_is_an_expectation_in_one_pass_and_planned_equals_naive(tiny_engine):
    # float64: planned (batched, prefix-shared) and naive (one prompt per pass) give the same
    # scores to the last bit here; in float32 they differ by batching noise (~3e-6 on tiny).
    con = aisql.connect(model="tiny", cache=False, dtype="float64", dialect="bigquery")
    con.duckdb.execute("CREATE TABLE r AS SELECT * FROM (VALUES (1, 'Loved it'), (2, 'Hated it'), (3, 'Fine'), (4, 'Loved it')) v(id, t)")
    sql = "SELECT id, AI.SCORE(('Rate from 1 to 5 how much the reviewer liked it: ', t)) AS s FROM r ORDER BY s DESC, id LIMIT 3"
    planned, naive = con.run(sql), con.run(sql, naive=True)
    assert planned.stats.totals()["decode_passes"] == 0 and planned.stats.totals()["generated_tokens"] == 0
    a, b = planned.table.to_pylist(), naive.table.to_pylist()
    assert [r["id"] for r in a] == [r["id"] for r in b]
    assert all(abs(x["s"] - y["s"]) <= 1e-6 for x, y in zip(a, b))
    assert all(1.0 <= r["s"] <= 5.0 for r in a)
    ten = con.run("SELECT AI.SCORE(t, {'scale': [1, 10]}) AS s FROM r").table.column("s").to_pylist()
    assert all(1.0 <= v <= 10.0 for v in ten)  # "10" is two tokens here: scored by full likelihood
    with pytest.raises(BindError, match="no scale"):
        con.run("SELECT AI.SCORE(t) FROM r")
    with pytest.raises(BindError, match="lowest value 5 must be below its highest 1"):
        con.run("SELECT AI.SCORE(t, {'scale': [5, 1]}) FROM r")
    con.close()


# ---- typed generation --------------------------------------------------------------------------


@pytest.mark.parametrize("grammar, good, bad", [("int", ["42", " -7"], ["4.2", "x"]), ("double", ["3.5", " -1e3", "2."], ["1e", "--1"]), ("bool", ["true", " FALSE"], ["yes", "tru"])])
def test_literal_grammars(grammar, good, bad):
    g = GRAMMARS[grammar]
    assert all(g.is_complete(t) for t in good)
    assert not any(g.is_complete(t) for t in bad)


def test_typed_generation_always_decodes_a_literal(bq, tiny_engine):
    sql = """SELECT id, AI.GENERATE_INT(('How many settings? ', review)).result AS n,
                    AI.GENERATE_DOUBLE(('Price? ', review)) AS d, AI.GENERATE_BOOL(('Is it loud? ', review)) AS b,
                    AI.GENERATE_INT(('How many? ', review)).status AS s
             FROM shop.reviews ORDER BY id"""
    planned, naive = bq.run(sql), bq.run(sql, naive=True)
    assert planned.table.to_pylist() == naive.table.to_pylist()
    constraint = constraint_for("int", tiny_engine.tokenizer, tiny_engine.stop_ids)
    for row in planned.table.to_pylist():
        assert row["s"] == ""
        assert row["n"] is None or isinstance(row["n"], int)
        assert row["d"] is None or math.isfinite(row["d"])
        assert row["b"] in (True, False, None)
    assert constraint.candidates  # the tokenizer has digit tokens to choose from


def test_constraint_ends_a_literal_when_the_model_leaves_the_grammar():
    import torch

    from aisql.engine.decoding.constrained import Constraint

    vocab = tuple("0123456789") + (" legs", "</s>")
    constraint = Constraint(GRAMMARS["int"], vocab, stop_ids=(11,))
    wants_legs = torch.zeros(len(vocab))
    wants_legs[10], wants_legs[8] = 5.0, 3.0  # " legs" first, then "8"
    assert constraint.choose(wants_legs, "") == 8  # no literal yet: the best digit
    assert constraint.choose(wants_legs, "8") is None  # "8" is whole and the model moves on: it ends
    wants_more = torch.zeros(len(vocab))
    wants_more[0] = 5.0
    assert constraint.choose(wants_more, "8") == 0  # "80": the model's own choice stays
    assert 11 in constraint.allowed("8") and 11 not in constraint.allowed("")
