"""How sure AI.IF's answers are: P(Yes) kept with each answer, the run summary's yes-rate and
near-coin-toss count, and `{'min_confidence': x}` for a threshold of the user's."""

from __future__ import annotations

import pytest

from aisql.errors import AisqlError
from aisql.executor.store.answer_store import Answer
from aisql.executor.store.cache import _decode, _encode
from aisql.executor.report.run_stats import NodeStats, RunStats
from aisql.output import signal_lines

ASK = "SELECT id, AI.IF(PROMPT('Is this review positive? {{review}}'){options}) AS yes FROM reviews ORDER BY id"


def answers(con, options: str = "", **run) -> dict[int, bool]:
    result = con.run(ASK.format(options=options), **run)
    return dict(zip(result.table.column("id").to_pylist(), result.table.column("yes").to_pylist())), result


def test_summary_counts_yes_and_near_coin_toss_answers(make_connection):
    con = make_connection()
    said, result = answers(con)
    (node,) = result.stats.nodes
    assert node.answers_scored == node.prompts_unique == 12  # every distinct prompt's P(Yes) is known
    yes_rows = con.duckdb.execute("SELECT count(DISTINCT review) FROM reviews WHERE id IN (SELECT unnest(?))", [[i for i, y in said.items() if y]]).fetchall()[0][0]
    assert node.answers_yes == yes_rows  # distinct prompts answered Yes
    assert 0 <= node.answers_near_boundary <= 12
    line, worrying = signal_lines(result.stats)[0]
    assert f"Yes for {node.answers_yes / 12:.0%} of 12 distinct prompts" in line and not worrying
    assert result.stats.to_dict()["nodes"][0]["answers_near_boundary"] == node.answers_near_boundary


def test_min_confidence_is_a_threshold_on_p_yes_and_planned_equals_naive(make_connection):
    con = make_connection()
    default, _ = answers(con)
    strict, strict_result = answers(con, ", {'min_confidence': 0.9}")
    loose, _ = answers(con, ", {'min_confidence': 0.1}")
    assert {i for i, y in strict.items() if y} <= {i for i, y in default.items() if y} <= {i for i, y in loose.items() if y}
    assert strict_result.stats.nodes[0].function.endswith("{'min_confidence': 0.9})")
    naive, _ = answers(con, ", {'min_confidence': 0.9}", naive=True)
    assert naive == strict


@pytest.mark.parametrize(
    "call, message",
    [
        ("AI.IF(PROMPT('{review}'), {'min_confidence': 1.5})", "between 0 and 1"),
        ("AI.IF(PROMPT('{review}'), {'min_confidence': 'high'})", "between 0 and 1"),
        ("AI.CLASSIFY(PROMPT('{review}'), ['a', 'b'], {'min_confidence': 0.8})", "is AI.IF's"),
    ],
)
def test_min_confidence_errors_name_the_problem(make_connection, call, message):
    con = make_connection()
    with pytest.raises(AisqlError, match=message):
        con.run(f"SELECT {call} FROM reviews")


def test_p_yes_is_kept_in_the_result_cache_and_older_entries_still_read():
    answer = Answer(True, 12, score=0.7, p_yes=0.91)
    assert _decode(_encode(answer)) == answer
    assert _decode('{"v": true, "c": 12, "s": 0.7}') == Answer(True, 12, score=0.7)  # cached before p_yes was kept
    assert _decode('{"v": true, "c": 12, "s": 0.7, "p": 1.5}') is None  # not a probability: asked again


def test_answers_near_chance_or_all_one_side_are_said():
    def stats(scored, yes, near, spread=2.0):
        node = NodeStats(node="ai_1", function="AI.IF(...)", strategy="prefetch", answers_scored=scored, answers_yes=yes, answers_near_boundary=near)
        node.log_odds_squares = scored * spread**2  # log-odds of mean 0 and this standard deviation
        return RunStats(model="m", model_note=None, mode="planned", nodes=[node])

    assert [w for _, w in signal_lines(stats(100, 60, 10))] == [False]
    assert [w for _, w in signal_lines(stats(100, 60, 40))] == [False]  # 40% near: a working model can (RESULTS §27)
    assert "barely prefers one answer for 50%" in signal_lines(stats(100, 60, 50))[1][0]
    assert "all 50 answers are Yes" in signal_lines(stats(50, 50, 0))[1][0]
    assert "96% of 100 answers are No" in signal_lines(stats(100, 4, 0))[1][0]
    assert "hardly varies" in signal_lines(stats(100, 50, 0, spread=0.2))[1][0]
    assert len(signal_lines(stats(5, 5, 0))) == 1  # too few to say


def test_generated_answers_all_alike_are_said():
    """AI.GENERATE answering one text for every row says nothing about the rows."""

    def stats(values):
        node = NodeStats(node="ai_1", function="AI.GENERATE(...)", strategy="prefetch")
        node.count_generated(values)
        return RunStats(model="m", model_note=None, mode="planned", nodes=[node])

    alike = signal_lines(stats(["billing"] * 30))
    assert alike == [("ai_1's answers carry little signal: the same answer 'billing' for all 30 distinct prompts; rephrase the question, or use a larger model (--model)", True)]
    assert signal_lines(stats(["billing"] * 29 + ["refund"])) == []
    assert signal_lines(stats(["billing"] * 5)) == []  # too few to say


def test_the_duckdb_functions_count_generated_answers(tiny_engine):
    import duckdb

    import aisql
    from aisql.executor.report.signals import quality_lines

    con = duckdb.connect()
    handle = aisql.register(con, engine=tiny_engine, cache=False)
    con.sql("SELECT ai_generate('Say a word about ' || i::VARCHAR, max_tokens => 2) FROM range(25) t(i)").fetchall()
    node = handle.stats["ai_generate"]
    assert node.answers_generated == 25 and node.first_generated is not None
    assert all(line.warning == (not node.generated_differ) for line in quality_lines([node]))


def test_labelled_examples_replace_the_label_free_warnings_with_their_own_verdict():
    """With examples the answers are the chosen rule's: the label-free P(Yes) warnings are set
    aside, and the examples say whether the answers carry signal (the rule's interval vs chance)."""

    def stats(low, high, metric="balanced accuracy", per_label=None):
        node = NodeStats(node="ai_1", function="AI.IF(...)", strategy="prefetch", answers_scored=100, answers_yes=50, answers_near_boundary=60)
        node.log_odds_squares = 100 * 4.0
        chosen = {"name": "probe", "rule": "a probe", "quality": (low + high) / 2, "low": low, "high": high, "how": "5-fold cross-validated"}
        node.decision = {
            "source": "examples",
            "examples": 24,
            "per_label": per_label or {"false": 12, "true": 12},
            "metric": metric,
            "chosen": "probe",
            "rule": "a probe",
            "candidates": [chosen],
        }
        return RunStats(model="m", model_note=None, mode="planned", nodes=[node])

    said = signal_lines(stats(0.35, 0.73))
    warnings = [text for text, warning in said if warning]
    assert warnings == [
        "ai_1's answers carry no measurable signal on its 24 labelled examples: a probe balanced accuracy 0.54 [0.35, 0.73], chance 0.50; "
        "label more rows (aisql label), rephrase the question, or use a larger model (--model)"
    ]
    assert not any("barely prefers" in text for text, _ in said)  # 60% near a coin toss: P(Yes) is not what answers
    assert not any(warning for _, warning in signal_lines(stats(0.62, 0.94)))  # above chance: no warning
    three = {"a": 4, "b": 4, "c": 4}
    assert any(w for _, w in signal_lines(stats(0.30, 0.60, per_label=three)))  # chance 1/3 for three labels
    assert not any(w for _, w in signal_lines(stats(0.40, 0.70, per_label=three)))
    assert any(w for _, w in signal_lines(stats(-0.1, 0.4, metric="Spearman")))


def _classify_node(answers: list[tuple[str, list[float]]], labels: list[str], own: list[str] | None = None) -> NodeStats:
    """A CLASSIFY node fed as the runtime feeds it: each distinct answer's signal, then its value."""
    node = NodeStats(node="ai_1", function="AI.CLASSIFY(...)", strategy="prefetch", labels=labels)
    for i, (value, probabilities) in enumerate(answers):
        import math

        answer = Answer(value, 10, logprobs=tuple(math.log(p) for p in probabilities))
        node.count_signal(answer, None if own is None else own[i])
        node.count_values((value,))
    return node


def test_a_classifier_collapsed_onto_one_label_warns_and_suggests_examples():
    """The newcomer's case: 'delivery' for 90% of the e-mails, two labels never chosen — the model
    gives 'delivery' well under 90% probability: its likeliest label leans; examples shift it."""
    labels = ["delivery", "billing", "cancellation", "technical", "product"]
    leaning = [0.45, 0.2, 0.15, 0.1, 0.1]
    answers = [("delivery", leaning)] * 45 + [("billing", [0.2, 0.45, 0.15, 0.1, 0.1])] * 3 + [("cancellation", [0.2, 0.15, 0.45, 0.1, 0.1])] * 2
    said = signal_lines(RunStats(model="m", model_note=None, mode="planned", nodes=[_classify_node(answers, labels)]))
    warnings = [text for text, warning in said if warning]
    assert len(warnings) == 1
    assert "'delivery' for 90% of 50 prompts while the model gives it 42% probability on average" in warnings[0]
    assert "never chosen: 'technical', 'product'" in warnings[0] and "examples =>" in warnings[0]
    spread = [("delivery", [0.7, 0.1, 0.1, 0.05, 0.05])] * 20 + [("billing", [0.1, 0.7, 0.1, 0.05, 0.05])] * 15 + [("cancellation", [0.1, 0.1, 0.7, 0.05, 0.05])] * 15
    assert not any(w for _, w in signal_lines(RunStats(model="m", model_note=None, mode="planned", nodes=[_classify_node(spread, labels)])))
    even = [(labels[i % 5], [0.2, 0.2, 0.2, 0.2, 0.2]) for i in range(40)]  # every row read alike
    flat = [text for text, w in signal_lines(RunStats(model="m", model_note=None, mode="planned", nodes=[_classify_node(even, labels)])) if w]
    assert len(flat) == 1 and "nearly even for most rows" in flat[0]


def test_signals_are_read_on_the_models_own_answers_not_silenced_by_the_examples_rule():
    """Examples' offsets spread the labels; the collapse is still said — as a warning while the
    examples cannot show the rule beats chance, as information once they do."""
    labels = ["a", "b", "c"]
    own = ["a"] * 40
    after = [labels[i % 3] for i in range(40)]
    node = _classify_node([(v, [0.6, 0.2, 0.2]) for v in after], labels, own=own)
    chosen = {"name": "offsets", "rule": "offsets on the labels", "quality": 0.5, "low": None, "high": None, "how": "held out"}
    node.decision = {"source": "examples", "examples": 12, "per_label": {"a": 4, "b": 4, "c": 4}, "metric": "balanced accuracy", "chosen": "offsets", "rule": "offsets", "candidates": [chosen]}
    warned = [text for text, w in signal_lines(RunStats(model="m", model_note=None, mode="planned", nodes=[node])) if w]
    assert len(warned) == 1 and "the model's own labels, before the examples' rule" in warned[0] and "'a' for 100% of 40" in warned[0]
    chosen.update(quality=0.7, low=0.52, high=0.85)
    said = signal_lines(RunStats(model="m", model_note=None, mode="planned", nodes=[node]))
    assert not any(w for _, w in said)
    assert any("alone carry little signal" in text and "the labelled examples' rule answers instead" in text for text, _ in said)
    chosen.update(quality=0.4, low=0.2, high=0.6)  # reaches chance (1/3): the examples' verdict
    warned = [text for text, w in signal_lines(RunStats(model="m", model_note=None, mode="planned", nodes=[node])) if w]
    assert len(warned) == 1 and "no measurable signal on its 12 labelled examples" in warned[0]


def test_bunched_scores_are_read_before_the_examples_map():
    node = NodeStats(node="ai_1", function="AI.SCORE(...)", strategy="prefetch", labels=["1", "2", "3", "4", "5"])
    for i in range(30):
        own = 3.0 + 0.01 * (i % 3)  # the model scores every row alike
        node.count_signal(Answer(1.0 + (i % 5), 10), own)  # a monotone map spread them over the scale
        node.count_values((1.0 + (i % 5),))
    node.decision = {"source": "examples", "examples": 16, "per_label": {}, "metric": "Spearman", "chosen": "map", "rule": "a map", "candidates": [{"name": "map", "rule": "a map", "quality": 0.2, "low": None, "high": None, "how": "held out"}]}
    warned = [text for text, w in signal_lines(RunStats(model="m", model_note=None, mode="planned", nodes=[node])) if w]
    assert len(warned) == 1 and "bunched" in warned[0] and "before the examples' map" in warned[0]


def test_an_estimate_from_labelled_rows_is_never_shown_bare():
    from aisql.executor.report.signals import examples_line, with_interval

    assert with_interval(0.537, 0.31, 0.74) == "0.54 [0.31, 0.74]"
    assert with_interval(0.537, None, None) == "0.54 (too few examples to tell how sure)"
    report = {"examples": 6, "per_label": {"a": 3, "b": 3}, "metric": "balanced accuracy", "chosen": "offsets", "rule": "offsets",
              "candidates": [{"name": "offsets", "rule": "offsets", "quality": 0.537, "low": None, "high": None, "how": "held out"},
                             {"name": "own", "rule": "the likeliest label", "quality": 0.475, "low": 0.3, "high": 0.6, "how": "on the examples"}]}
    line = examples_line(report)
    assert "0.54 (too few examples to tell how sure)" in line and "0.47 [0.30, 0.60]" in line
