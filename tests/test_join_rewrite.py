"""AI joins without N x M questions (aisql.executor.joins.join_rewrite): the pair split, the two scores,
the strategy chosen and said, the quality check that falls back, exact mode untouched, bad options.
The product path runs the tiny model (answers meaningless, the mechanics real)."""

from __future__ import annotations

import numpy as np
import pytest

from aisql.errors import AisqlError
from aisql.executor.joins import join_rewrite

ASPECTS = ("quality", "price", "size", "delivery", "durability")
JOIN = """
SELECT r.id, a.aspect FROM reviews r JOIN aspects a
ON AI.IF(PROMPT('Review: {{r.review}}\\nDoes it talk about {{a.aspect}}?'){options})
ORDER BY r.id, a.aspect
"""


def with_aspects(con, aspects=ASPECTS):
    """The example reviews made distinct (40 rows: more than the check's 16) and a table of aspects."""
    con.duckdb.execute("CREATE OR REPLACE TABLE reviews AS SELECT id, review || ' (#' || id || ')' AS review FROM reviews WHERE id <= 40")
    con.duckdb.execute("CREATE OR REPLACE TABLE aspects AS SELECT unnest(?::VARCHAR[]) AS aspect", [list(aspects)])
    return con


def test_sides_split_by_table_and_the_smaller_side_is_listed():
    assert join_rewrite.sides([{"r"}, {"a"}, {"r"}]) == ((1,), (0, 2))  # tables sorted: a, r
    assert join_rewrite.sides([{"r"}, {"r"}]) is None  # one table: not a join of two
    assert join_rewrite.sides([{"r", "a"}, {"a"}]) is None  # an argument reading both tables
    text_of = {(f"review {i}", aspect): f"review {i} / {aspect}" for i in range(7) for aspect in ASPECTS[:3]}
    pairs = join_rewrite.split_pairs(text_of, ((0,), (1,)))
    assert len(pairs.rows) == 7 and len(pairs.candidates) == 3 and pairs.candidate_args == (1,)
    for text, row, candidate in zip(pairs.texts, pairs.row_of, pairs.candidate_of):
        assert text == f"{pairs.rows[row][0]} / {pairs.candidates[candidate][0]}"
    assert join_rewrite.listing_problem(pairs) is None
    assert join_rewrite.choose_strategy("auto", 3, None, has_embeddings=False)[0] == "classify"
    many = join_rewrite.split_pairs({(f"r{i}", f"c{j}"): f"{i}/{j}" for i in range(80) for j in range(70)}, ((0,), (1,)))
    problem = join_rewrite.listing_problem(many)
    assert "70 distinct values" in problem
    assert join_rewrite.choose_strategy("auto", 70, problem, has_embeddings=True)[0] == "embed"
    assert join_rewrite.choose_strategy("auto", 70, problem, has_embeddings=False)[0] == "proxy"
    same = join_rewrite.split_pairs({("r1", "a "): "1", ("r1", "a"): "2", ("r2", "a"): "3"}, ((0,), (1,)))
    assert "read the same" in join_rewrite.listing_problem(same)
    strategy, why = join_rewrite.choose_strategy("classify", 70, problem, has_embeddings=True)
    assert strategy == "exact" and "does not apply" in why  # a forced listing that cannot be made: exact, said


def test_classification_prompt_marks_the_candidates_place_and_lists_them():
    from aisql.sql.template import parse_template

    template = parse_template("Review: {r.review}\nAbout {a.aspect}?")
    text_of = {("great", "price"): "t1", ("great", "size"): "t2", ("bad", "price"): "t3", ("ok", "size"): "t4"}
    pairs = join_rewrite.split_pairs(text_of, ((0,), (1,)))
    texts = join_rewrite.classification_texts(pairs, template.render)
    assert texts == ["Review: bad\nAbout [category]?", "Review: great\nAbout [category]?", "Review: ok\nAbout [category]?"]
    assert join_rewrite.classification_options(pairs).labels == ("price", "size")
    scores = join_rewrite.classify_scores(pairs, [[0.0, np.log(3.0)], [np.log(3.0), 0.0], [0.0, 0.0]])
    assert np.allclose(scores, [0.75, 0.25, 0.25, 0.5])  # texts t1..t4: P(candidate | row), a softmax per row


def test_embedding_scores_in_blocks_equal_the_whole_product(monkeypatch):
    rng = np.random.default_rng(0)
    rows = [(f"row {i}",) for i in range(11)]
    candidates = [(f"c {j}",) for j in range(4)]
    vectors = {join_rewrite.side_text(v): rng.normal(size=8) for v in rows + candidates}
    text_of = {(r[0], c[0]): f"{r[0]}|{c[0]}" for r in rows for c in candidates if (hash(r[0] + c[0]) % 5)}
    pairs = join_rewrite.split_pairs(text_of, ((0,), (1,)))
    embed = lambda texts: np.array([vectors[t] for t in texts])
    whole = join_rewrite.embed_scores(pairs, embed)
    monkeypatch.setattr(join_rewrite, "BLOCK_ROWS", 3)
    assert np.allclose(join_rewrite.embed_scores(pairs, embed), whole)
    unit = lambda v: v / np.linalg.norm(v)
    for text, row, candidate in zip(pairs.texts, pairs.row_of, pairs.candidate_of):
        cosines = np.array([unit(vectors[pairs.rows[row][0]]) @ unit(vectors[c[0]]) for c in pairs.candidates])
        expected = np.exp(cosines / join_rewrite.EMBED_TEMPERATURE)
        assert np.isclose(whole[pairs.texts.index(text)], expected[candidate] / expected.sum())


def test_a_rows_matches_are_the_candidates_rated_above_an_even_spread():
    text_of = {(f"r{i}", c): f"{i}{c}" for i in range(5) for c in "abcd"}
    pairs = join_rewrite.split_pairs(text_of, ((0,), (1,)))
    by_row = {0: [0.7, 0.1, 0.1, 0.1], 1: [0.3, 0.3, 0.2, 0.2], 2: [0.25, 0.25, 0.25, 0.25], 3: [0.1, 0.1, 0.1, 0.7], 4: [0.0, 0.5, 0.5, 0.0]}
    scores = np.array([by_row[r][c] for r, c in zip(pairs.row_of, pairs.candidate_of)])
    picked = join_rewrite.above_uniform_matches(pairs, scores)
    chosen = {(pairs.rows[r][0], pairs.candidates[c][0]) for r, c, p in zip(pairs.row_of, pairs.candidate_of, picked) if p}
    assert chosen == {("r0", "a"), ("r1", "a"), ("r1", "b"), ("r3", "d"), ("r4", "b"), ("r4", "c")}  # sure: one; even: none


def test_the_check_reads_recall_and_precision_against_the_model():
    from aisql.planner.approximation import Targets

    result = join_rewrite.check([True, True, False, False], [True, False, True, False], Targets())
    assert (result.positives, result.returned, result.agreed, result.recall, result.precision) == (2, 2, 1, 0.5, 0.5)
    assert not result.passes(Targets()) and result.passes(Targets(recall=0.5, precision=0.5))
    assert join_rewrite.check([False, False], [False, False], Targets()).passes(Targets())  # nothing to find, nothing returned
    assert not join_rewrite.check([True, False], [False, False], Targets()).passes(Targets())


def test_join_as_classification_runs_checks_and_is_said(make_connection, tmp_path):
    """Forced classify on reviews x 5 aspects: one classification prompt per review (under its
    own key), the check's rows answered exactly and cached under the exact plan's key — an
    exact run afterwards finds them —, the answers outside the check the classification's
    when the check passes, the exact plan's when it does not."""
    cache = tmp_path / "answers.sqlite"
    con = with_aspects(make_connection(cache=cache))
    for targets in ("", ", 'recall': 0.01, 'precision': 0.01"):
        result = con.run(JOIN.format(options=", {'join': 'classify', 'seed': 3" + targets + "}"))
        node = result.stats.nodes[0]
        report = node.approximate
        check = report["check"]
        reviews = con.sql("SELECT count(DISTINCT review) FROM reviews").fetchall()[0][0]
        assert node.join["strategy"] == "classify" and report["join_strategy"] == "classify" and node.strategy == "join-classify"
        assert report["rewrite_prompts"] == reviews and report["join_candidates"] == len(ASPECTS)
        assert report["rows"] == reviews * len(ASPECTS) and check["rows"] == 16 and check["pairs"] == 16 * len(ASPECTS)
        passes = check["positives"] == 0 or (check["recall"] >= report["targets"]["recall"] and (check["precision"] or 0) >= report["targets"]["precision"])
        assert (report["fallback_to_exact"] is None) == passes
        assert result.stats.is_approximate == passes
        if passes:
            assert report["llm_answered"] == check["pairs"] and report["proxy_answered"] == report["rows"] - check["pairs"]
            from aisql.output import approximate_note

            assert approximate_note(result.stats).startswith("REWRITTEN ai_1:")
    exact = with_aspects(make_connection(cache=cache)).run(JOIN.format(options=""))
    assert exact.stats.nodes[0].prompts_cached >= check["pairs"]  # the check's pairs: the exact plan's answers


def test_a_rewrite_that_would_miss_its_target_falls_back(make_connection, monkeypatch):
    """The quality check that can say no: a classification without signal (every candidate
    equally likely: none picked) misses recall/precision 0.9
    against the model on the check's rows, so the node is evaluated exactly — the exact plan's
    answers — and says so."""
    monkeypatch.setattr(join_rewrite, "classify_scores", lambda pairs, logprobs: np.full(pairs.pairs, 1.0 / len(pairs.candidates)))
    exact = with_aspects(make_connection()).run(JOIN.format(options="")).table.to_pylist()
    result = with_aspects(make_connection()).run(JOIN.format(options=", {'join': 'classify'}"))
    report = result.stats.nodes[0].approximate
    assert report["fallback_to_exact"].startswith("the classification agreed with the model on the check's 80 pairs (16 rows)")
    few = with_aspects(make_connection())
    few.duckdb.execute("DELETE FROM reviews WHERE id > 12")
    small = few.run(JOIN.format(options=", {'join': 'classify'}")).stats.nodes[0]
    assert small.join["strategy"] == "exact" and "every row" in small.join["why"] and small.approximate is None
    plain = few.run(JOIN.format(options="")).stats.nodes[0]
    assert (small.prompts_total, small.prompts_unique, small.strategy) == (plain.prompts_total, plain.prompts_unique, plain.strategy)
    assert report["llm_answered"] == report["rows"]
    assert result.table.to_pylist() == exact
    assert not result.stats.is_approximate
    from aisql.output import approximate_note

    assert "evaluated exactly (approximate mode fell back" in approximate_note(result.stats)


def test_an_embedding_blocked_join_runs_the_guaranteed_cascade(make_connection):
    result = with_aspects(make_connection()).run(JOIN.format(options=", {'join': 'embed'}"))
    report = result.stats.nodes[0].approximate
    assert report["join_strategy"] == "embed" and report["sampling"] == "importance"
    assert report["embedded_texts"] == report["join_rows"] + report["join_candidates"]
    assert report["proxy"].startswith("embeddings: ")


def test_join_exact_keeps_the_exact_plan_under_approximate_mode(make_connection):
    con = with_aspects(make_connection())
    exact = con.run(JOIN.format(options=""))
    forced = with_aspects(make_connection()).run(JOIN.format(options=", {'join': 'exact'}"), approximate=True)
    assert forced.table.to_pylist() == exact.table.to_pylist()
    assert forced.stats.nodes[0].approximate is None and forced.stats.nodes[0].join is None
    assert forced.stats.nodes[0].computed_tokens == exact.stats.nodes[0].computed_tokens


def test_a_listing_of_long_candidates_does_not_fire(make_connection):
    """Candidates that are not label-like (averaging more than 16 of the model's tokens: each row
    would pay every one of them) are not listed: the node runs exactly and says why."""
    wordy = with_aspects(make_connection(), tuple(f"aspect {i} " + "in some words " * 12 for i in range(8)))
    result = wordy.run(JOIN.format(options=", {'join': 'classify'}"))
    node = result.stats.nodes[0]
    assert node.join["strategy"] == "exact" and "tokens (more than 16)" in node.join["why"]
    assert "would cost about what asking the pairs does" in node.join["why"] and node.approximate is None


@pytest.mark.parametrize(
    "options, message",
    [
        (", {'join': 'hash'}", "'join' must be one of 'auto', 'exact', 'classify', 'embed', 'proxy'"),
        (", {'join': 3}", "'join' must be one of"),
    ],
)
def test_bad_join_values_are_refused_before_any_prompt(make_connection, options, message):
    with pytest.raises(AisqlError, match=message):
        with_aspects(make_connection()).run(JOIN.format(options=options))


def test_a_join_strategy_outside_a_join_is_refused_with_its_position(make_connection):
    with pytest.raises(AisqlError, match="applies to an AI predicate in JOIN ... ON") as raised:
        make_connection().run("SELECT id FROM reviews\nWHERE AI.IF(PROMPT('{review}'), {'join': 'classify'})")
    assert raised.value.line == 2


def test_explain_names_the_join_strategy_before_anything_runs(make_connection):
    con = with_aspects(make_connection())
    node = con.explain(JOIN.format(options=", {'join': 'classify'}")).to_dict()["statements"][0]["ai_nodes"][0]
    reviews = con.sql("SELECT count(DISTINCT review) FROM reviews").fetchall()[0][0]
    assert f"join as classification (asked for ({{'join': 'classify'}})): {reviews} prompts, one per row" in node["approximate"]
    assert f"instead of {reviews} x 5 pairs" in node["approximate"]
    auto = con.explain(JOIN.format(options=", {'recall': 0.95}")).to_dict()["statements"][0]["ai_nodes"][0]
    assert "join as classification (the smaller side has 5 distinct values" in auto["approximate"]
    exact = con.explain(JOIN.format(options=", {'join': 'exact'}")).to_dict()["statements"][0]["ai_nodes"][0]
    assert exact["approximate"] is None
