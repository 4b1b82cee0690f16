"""An AI join with labelled pairs (`examples => ...` on a join's AI.IF): its strategies — join as
classification and the exact plan — are judged against the labels, not against the model's own
pair answers, and the output says so (aisql.executor.joins.join_answers). Without labels the check
against the model decides, as before."""

from __future__ import annotations

import pytest

from aisql.executor.joins import join_answers
from aisql.executor.report.signals import quality_lines
from aisql.output import approximate_note

JOIN = (
    "SELECT c.id, k.kind FROM customers c JOIN kinds k ON AI.IF(PROMPT('{{c.profile}} Is this person a {{k.kind}}?'){options}) "
    "ORDER BY c.id, k.kind"
)
LABELLED = ", examples => (SELECT profile, kind, label FROM labelled_pairs)"
# the customers' occupations as their profiles word them: 12 candidates, so listing them once per row costs less than asking each pair
MATCHES = 16  # labelled pairs whose profile names the occupation, among the first 16 customers
KINDS = ("designer", "photographer", "teacher", "manager", "student", "chef", "parent", "developer", "veterinarian", "driver", "accountant", "nurse")


def connection(make_connection, labelled_customers: int = 16):
    con = make_connection()
    kinds = ", ".join(f"('{k}')" for k in KINDS)
    con.duckdb.execute(f"CREATE TABLE kinds AS SELECT * FROM (VALUES {kinds}) t(kind)")
    con.duckdb.execute(
        "CREATE TABLE labelled_pairs AS SELECT c.profile, k.kind, c.profile ILIKE '%' || k.kind || '%' AS label "
        f"FROM customers c, kinds k WHERE c.id <= {labelled_customers}"
    )
    return con


def rows(result) -> list[tuple]:
    return list(zip(*[result.table.column(i).to_pylist() for i in range(result.table.num_columns)]))


def forced(monkeypatch, strategy: str) -> None:
    """The labels' verdict, whatever the tiny model's F1s are (they are noise)."""
    judge = join_answers.JoinAnswers._judged_by_labels

    def judged(self, pairs, why):
        out = judge(self, pairs, why)
        if out is not None:
            out["strategy"] = strategy
        return out

    monkeypatch.setattr(join_answers.JoinAnswers, "_judged_by_labels", judged)


def test_the_strategy_that_does_better_on_the_labelled_pairs_answers(make_connection):
    con = connection(make_connection)
    result = con.run(JOIN.format(options=", {'join': 'classify'}" + LABELLED))
    join = result.stats.nodes[0].join
    assert join["against"] == "labels" and join["labelled_pairs"] == 192 and join["labelled_matches"] == MATCHES
    better = "classify" if join["classify"]["f1"] >= join["exact"]["f1"] else "exact"
    assert join["strategy"] == better
    assert join["verdict"].startswith(f"chosen against 192 labelled pairs ({MATCHES} matches): F1 join as classification")
    said = [line.text for line in quality_lines(result.stats)]
    assert any(line.startswith("ai_1: ") and join["verdict"] in line for line in said)


def test_join_as_classification_under_labels_answers_every_pair_without_asking_them(make_connection, monkeypatch):
    forced(monkeypatch, "classify")
    con = connection(make_connection)
    con.engine.reset_cache()  # both runs from a cold prefix cache: computed tokens compare
    rewritten = con.run(JOIN.format(options=", {'join': 'classify'}" + LABELLED))
    other = connection(make_connection)
    other.engine.reset_cache()
    exact = other.run(JOIN.format(options=LABELLED))
    assert rewritten.stats.nodes[0].approximate["against"] == "labels"
    assert rewritten.stats.totals()["computed_tokens"] < exact.stats.totals()["computed_tokens"]
    note = approximate_note(rewritten.stats)
    assert note.startswith("REWRITTEN ai_1 under labels: 480 of 480 pairs answered by join as classification: 40 prompts list the 12 candidates")
    assert "answers under labels, not the model's pairwise answers" in note


def test_the_exact_plan_chosen_under_labels_is_the_exact_plan(make_connection, monkeypatch):
    forced(monkeypatch, "exact")
    chosen = connection(make_connection).run(JOIN.format(options=", {'join': 'classify'}" + LABELLED))
    exact = connection(make_connection).run(JOIN.format(options=LABELLED))
    assert rows(chosen) == rows(exact)  # every pair asked, decided by the examples' rule
    assert chosen.stats.nodes[0].join["strategy"] == "exact" and approximate_note(chosen.stats) is None


def test_too_few_labelled_matches_leave_the_check_against_the_model(make_connection):
    con = connection(make_connection, labelled_customers=3)  # 36 labelled pairs, 3 matches: fewer than 4
    result = con.run(JOIN.format(options=", {'join': 'classify'}" + LABELLED))
    join = result.stats.nodes[0].join
    assert "against" not in join and join["labels"].startswith("36 labelled pairs with 3 matches")
    assert "check" in result.stats.nodes[0].approximate  # the model's own pair answers judged the rewrite


@pytest.mark.parametrize("options", ["", ", {'join': 'classify'}"])
def test_without_labels_nothing_changes(make_connection, options):
    result = connection(make_connection).run(JOIN.format(options=options))
    assert (result.stats.nodes[0].join or {}).get("against") is None
