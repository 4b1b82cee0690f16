"""Approximate mode: the cascade's statistics (a synthetic proxy signal, many seeds), its
fallback to exact evaluation, and the product path: targets in SQL and `--approximate`, labels
on every output, exact and naive runs unchanged. The proxy answering rows end to end, with its
targets checked against the model's own answers, is tests/test_real_model.py's (SmolLM2: the
tiny model's random answers give a proxy nothing to learn, so it falls back to exact)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from aisql.executor.approximate.cascade import Targets, clopper_pearson, run_cascade, thresholds

pytest.importorskip("sklearn")


def _synthetic(n: int, noise: float, seed: int = 7):
    """Texts, their 'LLM' answers and 16-d vectors where a linear direction predicts the answer."""
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(n, 16)).astype(np.float32)
    signal = vectors[:, 0] + noise * rng.normal(size=n)
    texts = [f"row {i}" for i in range(n)]
    truth = {t: bool(s > 0.3) for t, s in zip(texts, signal)}
    by_text = dict(zip(texts, vectors))
    return texts, truth, lambda batch: np.stack([by_text[t] for t in batch])


def _recall_precision(answers: dict, truth: dict) -> tuple[float, float]:
    tp = sum(1 for t, a in answers.items() if a and truth[t])
    return tp / max(1, sum(truth.values())), tp / max(1, sum(1 for a in answers.values() if a))


def test_clopper_pearson_bounds():
    lower, upper = clopper_pearson(50, 100, 0.025)
    assert 0.39 < lower < 0.41 and 0.59 < upper < 0.61
    assert clopper_pearson(0, 10, 0.05)[0] == 0.0 and clopper_pearson(10, 10, 0.05)[1] == 1.0


def test_thresholds_split_a_separable_sample():
    scores = np.linspace(0, 1, 200)
    labels = (scores > 0.5).astype(float)
    t_lo, t_hi = thresholds(scores, labels, Targets(recall=0.9, precision=0.9, delta=0.05))
    assert 0.45 < t_lo <= 0.55 and 0.5 <= t_hi < 0.6  # a few positives may go below t_lo: within the bound


@pytest.mark.slow
def test_targets_hold_across_seeds_and_save_llm_calls():
    """Over 40 seeds, recall and precision against the 'LLM' reach the targets except in at most
    the binomial 95% upper bound of delta's share of the runs; most rows never reach the LLM."""
    from scipy.stats import binom

    texts, truth, embed = _synthetic(3000, noise=0.3)
    targets = dict(recall=0.9, precision=0.9, delta=0.1)
    failures, calls = 0, []
    for seed in range(40):
        asked: list[str] = []

        def ask(batch):
            asked.extend(batch)
            return {t: truth[t] for t in batch}

        answers, report = run_cascade(texts, Targets(**targets, seed=seed), ask_llm=ask, embed=embed)
        assert not report.fallback
        recall, precision = _recall_precision(answers, truth)
        failures += recall < 0.9 or precision < 0.9
        calls.append(len(set(asked)))
        assert report.llm_rows == len(set(asked))
    assert failures <= binom.ppf(0.95, 40, 0.1)
    assert np.mean(calls) < 0.6 * len(texts)


def test_no_proxy_signal_falls_back_to_exact():
    texts, _, embed = _synthetic(1500, noise=0.0)
    rng = np.random.default_rng(3)
    coin = {t: bool(rng.random() < 0.5) for t in texts}  # answers the vectors cannot predict
    answers, report = run_cascade(texts, Targets(seed=1), ask_llm=lambda b: {t: coin[t] for t in b}, embed=embed)
    assert report.fallback and "too few rows" in report.fallback
    assert answers == coin and report.llm_rows == len(texts)


# ---- the product path --------------------------------------------------------------------------
QUERY = "SELECT id, AI.IF(PROMPT('Is this review about a broken product? {{review}}'){options}) AS broken FROM reviews ORDER BY id"


@pytest.mark.slow  # over ~2.5 s: the fast tier stays under 3 min
def test_sql_options_bad_values_and_exact_unchanged(make_connection):
    from aisql.errors import AisqlError

    con = make_connection()
    exact = con.run(QUERY.format(options="")).table.to_pylist()
    approximate = con.run(QUERY.format(options=", optimization_mode => 'MINIMIZE_COST'"), dialect="bigquery")
    report = approximate.stats.nodes[0].approximate
    assert report["targets"] == {"recall": 0.9, "precision": 0.9, "delta": 0.05}
    assert report["fallback_to_exact"]  # 120 reviews: the sample is the whole input
    assert approximate.table.to_pylist() == exact
    assert not approximate.stats.is_approximate and approximate.stats.to_dict()["approximate"] is False
    naive = make_connection().run(QUERY.format(options=", {'recall': 0.95}"), naive=True)
    assert naive.table.to_pylist() == exact and naive.stats.nodes[0].approximate is None  # naive is exact
    embedded = con.run(
        "SELECT id, AI.IF(('Is this review about a broken product? ', review), embeddings => AI.EMBED(review).result) AS broken "
        "FROM reviews ORDER BY id",
        dialect="bigquery",
    )  # BigQuery's form: embeddings => turns the optimized mode on; the AI.EMBED in it never runs
    assert embedded.table.to_pylist() == exact and len(embedded.stats.nodes) == 1
    assert embedded.stats.nodes[0].approximate is not None
    for options, message in [
        (", {'recall': 1.5}", "between 0 and 1"),
        (", optimization_mode => 'FAST'", "optimization_mode must be 'MINIMIZE_COST'"),
        (", {'seed': 4294967296}", "from 0 to 4294967295"),  # used to pay 200 prompts, then fail in scikit-learn
        (", {'seed': -1}", "from 0 to 4294967295"),
    ]:
        with pytest.raises(AisqlError, match=message):  # a bind error: refused before any prompt
            con.run(QUERY.format(options=options))
    with pytest.raises(AisqlError, match="from 0 to 4294967295"):
        make_connection().run(QUERY.format(options=""), approximate={"seed": 2**32})
    with pytest.raises(AisqlError, match="has no approximate mode"):
        con.run("SELECT AI.CLASSIFY(review, ['a', 'b'], {'recall': 0.9}) FROM reviews")
    plan = con.explain(QUERY.format(options=", {'recall': 0.95}")).to_dict()["statements"][0]["ai_nodes"][0]
    assert plan["approximate"].startswith("approximate (proxy cascade): recall >= 0.95")


@pytest.mark.slow
def test_cli_flag_labels_every_format(tmp_path):
    """`--approximate` runs every AI.IF in approximate mode; the label goes under the table, to
    stderr for CSV/JSON, into --stats-json and into Parquet metadata."""
    from conftest import EXAMPLES

    base = [sys.executable, "-m", "aisql.cli", "run", "-e",
            "SELECT id FROM 'data/reviews.csv' WHERE AI.IF(PROMPT('Is this review negative? {review}'))",
            "--model", "tiny", "--no-cache", "--approximate"]
    stats = tmp_path / "stats.json"
    out = subprocess.run(base + ["--format", "csv", "-q", "--stats-json", str(stats)], cwd=EXAMPLES, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    data = json.loads(stats.read_text())
    assert data["nodes"][0]["approximate"]["targets"]["recall"] == 0.9
    assert "approximate mode fell back" in out.stderr or "APPROXIMATE" in out.stderr  # said even with -q
