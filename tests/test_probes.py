"""Labelled rows teach the engine: the scoring pass's hidden state kept with every answer of a call
with examples (aisql.functions.hidden_states), a probe fitted on the examples' states
(aisql.functions.probe) and chosen against the label-probability rules only when clearly better
on the examples (aisql.functions.learning). The state is in the result cache, so other examples
ask the model nothing; the probe is applied to the stored state, so planned == naive."""

from __future__ import annotations

import math

import numpy as np
import pytest

from aisql.executor.store.answer_store import Answer, MemoryAnswerStore
from aisql.executor.store.cache import SqliteAnswerStore, _decode, _encode
from aisql.functions import by_name, learning, probe
from aisql.functions.ai_classify import ClassifyOptions
from aisql.functions.base import STALE, Options
from aisql.functions.decision import Decision
from aisql.functions.hidden_states import pack_state, unpack_states, valid_state

IF = by_name("IF")
IF_TASK = IF.task(Options())
CUSTOMERS = "AI.IF(PROMPT('Is this person over 50? {{profile}}'){options})"


def separable(n: int, width: int = 32, seed: int = 0) -> tuple[np.ndarray, list[int]]:
    """States whose dimension 3 tells the classes apart, every dimension on its own scale."""
    rng = np.random.default_rng(seed)
    labels = [i % 2 for i in range(n)]
    x = rng.normal(size=(n, width)) * np.geomspace(0.01, 100, width)
    x[:, 3] += np.where(np.array(labels) == 1, 1.0, -1.0)
    return x.astype(np.float32), labels


# ---- the state kept ---------------------------------------------------------------------------
def test_states_are_float16_bytes_clipped_and_checked():
    packed = pack_state([1.0, -2.5, 1e9])
    assert len(packed) == 6 and valid_state(packed)
    assert unpack_states([packed]).tolist() == [[1.0, -2.5, 65504.0]]  # beyond float16's range: clipped, not inf
    assert not valid_state(b"\x00") and not valid_state(b"") and not valid_state(b"\x00\x7c")  # odd length, empty, inf


def test_the_cache_keeps_the_state_and_refuses_a_damaged_one(tmp_path):
    answer = Answer(True, 12, score=0.7, p_yes=0.7, logprobs=(math.log(0.7), math.log(0.3)), state=pack_state(range(8)))
    assert _decode(_encode(answer), answer.state) == answer and "state" not in _encode(answer)  # the entry is JSON; the state its own column
    said = []
    store = SqliteAnswerStore(tmp_path / "a.sqlite", warn=said.append)
    store.put_many("k", {"t": answer, "plain": Answer(False, 3, logprobs=(math.log(0.2), math.log(0.8)))})
    found = store.get_many("k", ["t", "plain"])
    assert found["t"].state == answer.state and found["plain"].state is None
    store._db.execute("UPDATE states SET state = x'007c'")  # float16 inf: not a state aisql writes
    assert store.get_many("k", ["t"]) == {} and said and "could not be read" in said[0]  # asked again, and replaced
    store.put_many("k", {"t": answer})
    assert store.get_many("k", ["t"])["t"].state == answer.state
    assert store.clear() == 2 and store._db.execute("SELECT count(*) FROM states").fetchall() == [(0,)]


def test_a_probe_needs_the_state_and_the_examples_need_theirs():
    x, labels = separable(16)
    fitted = probe.fit(x, labels, probe.CLASSES)
    with_probe = IF_TASK.__class__(**{**IF_TASK.__dict__, "decision": Decision("examples", probe=fitted, keep_states=True)})
    plain = Answer(True, 5, logprobs=(math.log(0.9), math.log(0.1)))
    assert with_probe.read(plain) is STALE  # cached before states were kept: asked again
    stated = Answer(True, 5, logprobs=(math.log(0.9), math.log(0.1)), state=pack_state(x[1]))
    assert with_probe.read(stated).value is False  # the probe, not P(Yes) = 0.9, decides: x[1] is of class 1 (No)
    fitting = IF_TASK.__class__(**{**IF_TASK.__dict__, "decision": Decision("examples", keep_states=True, fitting=True)})
    assert fitting.read(plain) is STALE and fitting.read(stated) is stated
    keeping = IF_TASK.__class__(**{**IF_TASK.__dict__, "decision": Decision("examples", keep_states=True)})
    assert keeping.read(plain) is plain  # a rule on the probabilities reads an older answer as it is


# ---- the probe --------------------------------------------------------------------------------
def test_a_probe_is_one_dot_product_on_the_raw_state_and_reads_it_stored():
    x, labels = separable(40)
    fitted = probe.fit(x[:24], labels[:24], probe.CLASSES)
    predicted = fitted.predict(x[24:])
    assert np.mean(np.array(predicted) == np.array(labels[24:])) >= 0.75  # the one informative dimension, the least spread, found among 31 of noise
    assert [fitted.predict_one(pack_state(v)) for v in x[24:]] == fitted.predict(unpack_states([pack_state(v) for v in x[24:]]))
    assert probe.fit(x[:24], labels[:24], probe.CLASSES) == fitted  # deterministic: the same examples, the same probe
    with pytest.raises(ValueError):
        fitted.predict_one(pack_state(x[0][:5]))  # another model's width: unreadable, asked again


def test_folds_are_stratified_seeded_and_cover_every_example():
    labels = [0] * 9 + [1] * 3
    folds = probe.folds(labels, probe.CLASSES)
    assert len(folds) == 3 and sorted(np.concatenate(folds).tolist()) == list(range(12))
    assert all(sum(labels[i] for i in fold) == 1 for fold in folds)  # each fold holds the rare class
    assert [f.tolist() for f in folds] == [f.tolist() for f in probe.folds(labels, probe.CLASSES)]


def test_the_probe_is_taken_only_when_clearly_better_on_the_examples():
    x, labels = separable(24)
    truth = [label == 0 for label in labels]  # AI.IF: class 0 is Yes
    states = [pack_state(v) for v in x]
    flat = [(math.log(0.5), math.log(0.5))] * 24  # P(Yes) says nothing
    rule, report = IF.learn(IF_TASK, flat, truth, states)
    assert rule is not None and rule.probe is not None and report["chosen"] == learning.PROBE
    assert [c["name"] for c in report["candidates"]] == [learning.OWN, learning.LABEL_RULE, learning.PROBE]
    assert all(c["low"] <= c["quality"] <= c["high"] for c in report["candidates"])
    sharp = [(math.log(0.95), math.log(0.05)) if t else (math.log(0.05), math.log(0.95)) for t in truth]  # P(Yes) right every time
    noise = [pack_state(v) for v in np.random.default_rng(1).normal(size=(24, 32))]
    rule, report = IF.learn(IF_TASK, sharp, truth, noise)
    assert rule is None and report["chosen"] == learning.OWN  # the probe on noise does not beat it
    rule, report = IF.learn(IF_TASK, flat, truth, None)
    assert report["probe"].startswith("the engine returns no hidden states") and learning.PROBE not in [c["name"] for c in report["candidates"]]
    rule, report = IF.learn(IF_TASK, flat[:3], truth[:3], states[:3])
    assert report["probe"] == "a probe needs 2 examples of each answer"


def test_classify_and_score_probes():
    classify = by_name("CLASSIFY")
    task = classify.task(ClassifyOptions(("a", "b", "c")))
    rng = np.random.default_rng(0)
    labels = [("a", "b", "c")[i % 3] for i in range(30)]
    x = rng.normal(size=(30, 16)).astype(np.float32)
    for i, label in enumerate(labels):
        x[i, "abc".index(label)] += 3.0
    flat = [(math.log(1 / 3),) * 3] * 30
    rule, report = classify.learn(task, flat, labels, [pack_state(v) for v in x])
    assert rule.probe is not None and len(rule.probe.classes) == 3
    decided = task.__class__(**{**task.__dict__, "decision": rule})
    assert decided.read(Answer("a", 1, logprobs=flat[0], state=pack_state(x[1]))).value == "b"
    score = by_name("SCORE")
    from aisql.functions.ai_score import ScoreOptions

    score_task = score.task(ScoreOptions((1, 5)))
    values = [1.0 + 4.0 * (i % 5) / 4 for i in range(40)]
    y = rng.normal(size=(40, 16)).astype(np.float32)
    y[:, 0] = np.array(values) * 2.0
    middle = [tuple(math.log(0.2) for _ in range(5))] * 40
    assert score.learn(score_task, middle[:31], values[:31], [pack_state(v) for v in y[:31]])[1]["probe"] == "a probe on a score needs 32 examples"
    rule, report = score.learn(score_task, middle, values, [pack_state(v) for v in y])
    assert rule.probe is not None and rule.probe.kind == probe.NUMBER
    scored = score_task.__class__(**{**score_task.__dict__, "decision": rule})
    far = y[0].copy()
    far[0] = 1000.0
    assert scored.read(Answer(3.0, 1, logprobs=middle[0], state=pack_state(far))).value == 5.0  # held to the scale


# ---- through SQL ------------------------------------------------------------------------------
def customers_examples(con, low: int, high: int) -> str:
    name = f"labelled_{low}_{high}"
    con.duckdb.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT profile, age > 50 AS label FROM customers WHERE id BETWEEN {low} AND {high}")
    return f", examples => (SELECT profile, label FROM {name})"


def over_fifty(con, options: str, **run) -> tuple[dict, object]:
    result = con.run(f"SELECT id, {CUSTOMERS.format(options=options)} AS yes FROM customers ORDER BY id", **run)
    return dict(zip(result.table.column("id").to_pylist(), result.table.column("yes").to_pylist())), result


@pytest.fixture
def probe_always(monkeypatch):
    """The probe is taken whenever one can be fitted (the tiny model's states and P(Yes) are both
    noise, so the margin and the test against shuffled labels would usually keep the simpler rule)."""
    monkeypatch.setattr(learning, "MARGIN", -100.0)
    monkeypatch.setattr(learning, "ALPHA", 1.0)
    monkeypatch.setattr(learning, "above_chance", lambda candidate, labels: (True, 0.5))


def test_planned_equals_naive_under_a_probe(make_connection, probe_always):
    con = make_connection()
    options = customers_examples(con, 1, 16)
    planned, result = over_fifty(con, options)
    naive, naive_result = over_fifty(con, options, naive=True)
    assert result.stats.nodes[0].decision["chosen"] == learning.PROBE
    assert planned == naive
    assert result.stats.nodes[0].decision["rule"] == naive_result.stats.nodes[0].decision["rule"]
    assert result.stats.nodes[0].decision["candidates"] == naive_result.stats.nodes[0].decision["candidates"]


def test_other_examples_on_a_cached_run_ask_the_model_nothing(make_connection, probe_always, tmp_path):
    con = make_connection(cache=str(tmp_path / "answers.sqlite"))
    first, result = over_fifty(con, customers_examples(con, 1, 12))
    assert result.stats.totals()["prompts_evaluated"] > 0
    other, rerun = over_fifty(con, customers_examples(con, 20, 36))  # rows the first run asked as prompts of the call
    assert rerun.stats.totals()["prompts_evaluated"] == 0 and rerun.stats.totals()["computed_tokens"] == 0
    assert rerun.stats.nodes[0].decision["prompts_evaluated"] == 0 and rerun.stats.nodes[0].decision["prompts_cached"] == 17
    assert rerun.stats.nodes[0].decision["chosen"] == learning.PROBE  # a new probe, on the cached states
    con.close()
    fresh = make_connection(cache=str(tmp_path / "answers.sqlite"))  # another process reads the same file
    again, reread = over_fifty(fresh, customers_examples(fresh, 20, 36))
    assert again == other and reread.stats.totals()["computed_tokens"] == 0


class StopInNode:
    """Progress that presses Ctrl-C after the node's own first commit (its examples' came before)."""

    def start(self, node, description, total, cached):
        pass

    def advance(self, node, prompts, tokens):
        if node == "ai_1":
            raise KeyboardInterrupt

    def finish(self, node):
        pass


def test_ctrl_c_with_examples_keeps_every_answer_and_state_paid_for(tiny_engine, tmp_path, probe_always):
    from aisql.api import Connection
    from conftest import load_example_tables

    cache = tmp_path / "answers.sqlite"
    first = Connection(engine=tiny_engine, cache=str(cache))
    load_example_tables(first)
    options = customers_examples(first, 1, 16)
    with pytest.raises(KeyboardInterrupt):
        over_fifty(first, options, progress=StopInNode())
    kept = first.store.committed
    first.close()
    assert kept > 16
    store = SqliteAnswerStore(cache)
    answers, states = (store._db.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0] for table in ("answers", "states"))
    assert answers == states == kept  # every answer kept with its state
    store.close()
    again = Connection(engine=tiny_engine, cache=str(cache))
    load_example_tables(again)
    rows, result = over_fifty(again, customers_examples(again, 1, 16))
    totals = result.stats.totals()
    assert totals["prompts_evaluated"] == 40 - kept and result.stats.nodes[0].decision["prompts_evaluated"] == 0
    again.close()
    whole = Connection(engine=tiny_engine, cache=False)
    load_example_tables(whole)
    assert over_fifty(whole, customers_examples(whole, 1, 16))[0] == rows  # interrupted and resumed == one run
    whole.close()


def test_a_call_without_examples_keeps_no_states(make_connection):
    con = make_connection()
    store = con.store
    assert isinstance(store, MemoryAnswerStore)
    over_fifty(con, "")
    assert all(answer.state is None for answer in store._answers.values())
    _, result = over_fifty(con, customers_examples(con, 1, 12))
    with_state = sum(answer.state is not None for answer in store._answers.values())
    assert result.stats.nodes[0].decision["prompts_evaluated"] == 12  # the examples asked again: the fit reads their states
    if result.stats.nodes[0].decision["chosen"] == learning.PROBE:
        assert with_state == 40  # a probe answers: every prompt asked again for its state
    else:
        assert with_state == 12  # a rule on the probabilities answers from what was cached


def test_the_examples_line_says_which_rule_answers_and_how_sure(make_connection, probe_always):
    from aisql.executor.report.signals import quality_lines

    con = make_connection()
    _, result = over_fifty(con, customers_examples(con, 1, 16))
    (line,) = [l.text for l in quality_lines(result.stats) if "answers under labels" in l.text]
    assert line.startswith("ai_1: answers under labels from 16 labelled examples")
    assert "a probe on the model's hidden state (logistic regression, 64 features) — balanced accuracy" in line
    assert "(held out one at a time)" in line and "the likeliest label (the model's own answers)" in line

