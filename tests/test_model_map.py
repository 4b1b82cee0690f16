"""A model named in a query (BigQuery's `endpoint =>`, Snowflake's AI_COMPLETE model, FlockMTL's
model_name): answered by the run's model with a note; by the model `model_map` / `--model-map
NAME=MODEL` names for it (that call runs on that model, cached under its own key); refused with
`strict_models`. The second model is the tiny one with its weights shaken: other answers."""

from __future__ import annotations

import pytest
from conftest import load_example_tables, shaken_tiny_model

from aisql.errors import AisqlError

QUERY = "SELECT id, AI.SCORE(PROMPT('Rate from 1 to 5 how cheap this is: {0}', name), endpoint => 'gpt-4o') AS cheap FROM products WHERE id <= 12 ORDER BY id"
NATIVE = QUERY.replace(", endpoint => 'gpt-4o'", "")


@pytest.fixture(scope="module")
def other_model(tmp_path_factory):
    """Another model: the tiny one's weights plus as much noise again (answers that differ)."""
    return shaken_tiny_model(tmp_path_factory.mktemp("models") / "tiny-other", noise=1.0, seed=1)


def _answers(result):
    return [row["cheap"] for row in result.table.to_pylist()]


def test_a_mapped_name_is_answered_by_its_model(make_connection, other_model):
    from aisql.api import Connection

    mapped = make_connection(model_map={"GPT-4o": other_model}).run(QUERY)
    with Connection(model=other_model, cache=False) as con:
        load_example_tables(con)
        theirs = con.run(NATIVE)
    ours = make_connection().run(NATIVE)
    assert _answers(mapped) == _answers(theirs)
    assert _answers(mapped) != _answers(ours)  # the shaken model answers otherwise: the map was followed
    assert mapped.stats.notes[0] == (f"AI.SCORE: the model 'gpt-4o' named in the query is answered by {other_model} (--model-map)")
    naive = make_connection(model_map={"gpt-4o": other_model}).run(QUERY, naive=True)
    assert _answers(naive) == pytest.approx(_answers(mapped), rel=1e-6)  # batched vs one row: float32 sums


def test_unmapped_names_are_the_runs_model_with_a_note_and_strict_refuses(make_connection, other_model):
    plain = make_connection().run(QUERY)
    assert _answers(plain) == _answers(make_connection().run(NATIVE))
    assert "--model-map gpt-4o=MODEL chooses another" in plain.stats.notes[0]
    with pytest.raises(AisqlError) as err:
        make_connection().run(QUERY, strict_models=True)
    assert "'gpt-4o' named in the query is not this run's model" in err.value.message and err.value.line == 1
    assert make_connection(model_map={"gpt-4o": other_model}).run(QUERY, strict_models=True).table.num_rows == 12
    to_itself = make_connection(model_map={"gpt-4o": "tiny"}).run(QUERY)  # mapped to the run's model: no note
    assert not any("gpt-4o" in note for note in to_itself.stats.notes)
    # The same model on the same engine, whose prefix cache is warm by now: float32 sums in another
    # order on some CPUs (MKL blocks by the rows a pass computes), the same answers to 1e-6.
    assert _answers(to_itself) == pytest.approx(_answers(plain), rel=1e-6)


def test_explain_says_which_model_answers(make_connection, other_model):
    explanation = make_connection(model_map={"gpt-4o": other_model}).explain(QUERY)
    assert f"answered by {other_model} (--model-map)" in " ".join(str(explanation).split())
    assert explanation.to_dict()["notes"]


@pytest.mark.parametrize("entry", ["gpt-4o", "=tiny", "gpt-4o="])
def test_a_bad_entry_is_one_line(entry):
    from click.testing import CliRunner

    from aisql.cli import main

    done = CliRunner().invoke(main, ["run", "--model", "tiny", "--no-cache", "--model-map", entry, "-e", "SELECT 1"])
    assert done.exit_code != 0 and "--model-map" in done.output and "NAME=MODEL" in done.output and "Traceback" not in done.output


def test_python_model_maps_are_read_as_python_writes_them(make_connection, other_model):
    """Issue 58, cause 18: a model_map given as one 'NAME=MODEL' string was iterated character by
    character, and its errors named the CLI's --model-map. Python's spellings: a dict, a
    NAME=MODEL string, a list of them; errors say model_map and show a dict."""
    one = make_connection(model_map=f"gpt-4o={other_model}").run(QUERY)
    assert _answers(one) == _answers(make_connection(model_map={"gpt-4o": other_model}).run(QUERY))
    assert _answers(make_connection(model_map=[f"GPT-4o={other_model}"]).run(QUERY)) == _answers(one)
    for bad, said in [("gpt-4o", "model_map 'gpt-4o': write NAME=MODEL"), (42, "expected a dict {name: model} or NAME=MODEL texts, got int"),
                      ([("gpt-4o", "tiny")], "is not NAME=MODEL text"), ({"gpt-4o": 3}, "is not a model name and a model")]:
        with pytest.raises(AisqlError) as err:
            make_connection(model_map=bad)
        assert said in err.value.message and "--model-map" not in err.value.message + (err.value.hint or "")
        assert "model_map={'gpt-4o'" in err.value.hint


def test_explain_prices_a_mapped_call_as_its_model_runs_it(make_connection):
    """Issue 58, cause 16: explain priced a --model-map call as the run's model (~2,000x too low
    for a larger one). Each call is priced on the model that answers it: the mapped call as a run
    of that model prices it, the others as the run's model — in one plan."""
    from aisql.api import Connection

    both = (
        "SELECT id, AI.SCORE(PROMPT('Rate from 1 to 5 how cheap this is: {0}', name), endpoint => 'gpt-4o') AS cheap, "
        "AI.IF(PROMPT('Is {0} made of wood?', name)) AS wood FROM products WHERE id <= 12"
    )
    mapped = make_connection(model_map={"gpt-4o": "smollm2"}).explain(both).estimates[0]
    tiny = make_connection().explain(both).estimates[0]
    with Connection(model="smollm2", cache=False) as con:
        load_example_tables(con)
        smollm2 = con.explain(both).estimates[0]
    assert mapped.nodes[0].plan.flops == pytest.approx(smollm2.nodes[0].plan.flops)
    assert mapped.nodes[0].plan.flops > 10 * tiny.nodes[0].plan.flops
    assert mapped.nodes[1].plan.flops == pytest.approx(tiny.nodes[1].plan.flops)  # the unmapped call: the run's model
    assert mapped.plan.usd == pytest.approx(smollm2.nodes[0].plan.usd + tiny.nodes[1].plan.usd)
