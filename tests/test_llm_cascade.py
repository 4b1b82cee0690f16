"""Cascades with a proxy LLM (aisql.executor.approximate.score_first, importance, betting_bounds,
proxy_choice): the statistics on a synthetic two-model signal over many seeds, the bounds'
coverage, the proxy chosen and said, labels, the result cache kept apart per model, fallback.
The product path runs a real (tiny) oracle and a real proxy: the tiny model with its weights
perturbed — another model, which mostly agrees with it. None of this needs the 1.5B."""

from __future__ import annotations


import numpy as np
import pytest

from aisql.executor.approximate.betting_bounds import betting_lower_bound, betting_upper_bound
from aisql.executor.approximate.proxy_choice import choose_proxy
from aisql.executor.approximate.score_first import run_score_first
from aisql.planner.approximation import Targets
from conftest import shaken_tiny_model


def two_models(n: int, separation: float, seed: int = 1, positive_share: float = 0.76):
    """Texts, the oracle's answers and a proxy's P(yes) that follows them with noise."""
    rng = np.random.default_rng(seed)
    truth = rng.random(n) < positive_share
    logit = separation * (2 * truth - 1) + rng.normal(0, 1.5, n) + 0.5
    texts = [f"row {i:06d}" for i in range(n)]
    return texts, dict(zip(texts, truth.tolist())), dict(zip(texts, (1 / (1 + np.exp(-logit))).tolist()))


def cascade(texts, truth, scores, sampling, **targets):
    asked: list[str] = []

    def ask(batch):
        asked.extend(batch)
        return {t: truth[t] for t in batch}

    answers, report = run_score_first(texts, Targets(**targets), ask_llm=ask, proxy_scores=lambda batch: {t: scores[t] for t in batch}, sampling=sampling)
    return answers, report, asked


def recall_precision(answers, truth):
    tp = sum(1 for t, a in answers.items() if a and truth[t])
    return tp / max(1, sum(truth.values())), tp / max(1, sum(1 for a in answers.values() if a))


@pytest.mark.slow
@pytest.mark.parametrize("sampling", ["progressive", "uniform", "importance"])
def test_targets_hold_across_seeds(sampling):
    """60 seeds per sampling on a proxy that mostly agrees: recall and precision against the
    oracle reach 0.9 except in at most the binomial 95% bound of delta's share; each row is
    answered once by the oracle at most, and fewer than all rows reach it."""
    from scipy.stats import binom

    texts, truth, scores = two_models(2000, separation=2.0)
    failures, shares = 0, []
    for seed in range(60):
        answers, report, asked = cascade(texts, truth, scores, sampling, recall=0.9, precision=0.9, delta=0.05, seed=seed)
        assert len(asked) == len(set(asked)) == report.llm_rows
        recall, precision = recall_precision(answers, truth)
        failures += recall < 0.9 or precision < 0.9
        shares.append(report.llm_rows / len(texts))
    assert failures <= binom.ppf(0.95, 60, 0.05)
    assert np.mean(shares) < 0.6


def test_progressive_stops_at_a_quarter_when_the_proxy_agrees():
    texts, truth, _ = two_models(2000, separation=2.0)
    scores = {t: 0.95 if truth[t] else 0.05 for t in texts}  # agrees on every row
    answers, report, asked = cascade(texts, truth, scores, "progressive", seed=3)
    assert report.extra["stages_used"] == 1 and report.sample == 100 and report.llm_rows == 100  # a quarter of 400
    assert answers == truth and not report.fallback


def test_a_proxy_without_signal_falls_back_to_exact():
    texts, truth, _ = two_models(1500, separation=2.0)
    rng = np.random.default_rng(0)
    scores = {t: float(rng.random()) for t in texts}  # no relation to the oracle
    for sampling in ("progressive", "uniform", "importance"):
        answers, report, asked = cascade(texts, truth, scores, sampling)
        assert report.fallback and answers == truth and report.llm_rows == len(texts) == len(set(asked))


def test_an_auto_chosen_proxy_that_disagrees_is_dropped_after_a_pilot():
    """The pilot's rows are the sample's first: a proxy that ranks the oracle's answers poorly is
    never asked for the other rows, and the node is exact; one that agrees goes on."""
    from aisql.executor.approximate.score_first import PILOT_ROWS

    texts, truth, good = two_models(2000, separation=2.0)
    rng = np.random.default_rng(0)
    noise = {t: float(rng.random()) for t in texts}
    for scores, dropped in ((noise, True), (good, False)):
        scored: list[str] = []

        def proxy(batch, scores=scores):
            scored.extend(batch)
            return {t: scores[t] for t in batch}

        asked: list[str] = []
        answers, report = run_score_first(
            texts, Targets(), ask_llm=lambda b: asked.extend(b) or {t: truth[t] for t in b}, proxy_scores=proxy, sampling="uniform", pilot=True
        )
        assert answers == truth if dropped else not report.fallback
        assert (len(scored) == PILOT_ROWS) == dropped and ("pilot" in report.fallback) == dropped
        assert len(asked) == len(set(asked))  # the pilot's rows are never asked twice
    for sampling in ("importance", "progressive"):
        answers, report = run_score_first(texts, Targets(), ask_llm=lambda b: {t: truth[t] for t in b}, proxy_scores=lambda b: {t: good[t] for t in b}, sampling=sampling, pilot=True)
        assert report.extra["pilot_auc"] > 0.85 and not report.fallback


def test_a_report_is_strict_json_when_a_side_is_empty():
    import json

    texts, truth, _ = two_models(2000, separation=2.0)
    scores = {t: 0.95 if truth[t] else 0.05 for t in texts}
    _, report, _ = cascade(texts, truth, scores, "uniform", precision=0.999, delta=0.01)  # no TRUE side
    data = report.to_dict()
    json.dumps(data, allow_nan=False)
    assert None in data["thresholds"]


def test_the_sample_is_the_whole_of_a_small_input():
    texts, truth, scores = two_models(150, separation=2.0)
    answers, report, asked = cascade(texts, truth, scores, "progressive")
    assert report.fallback == "the sample is the whole input" and answers == truth


@pytest.mark.slow  # over ~2.5 s: the fast tier stays under 3 min
def test_betting_bounds_cover_the_mean():
    """One-sided bounds at alpha 0.05 miss the true mean in at most the binomial bound of runs,
    for 0/1 draws and for weighted ones, and are not vacuous."""
    from scipy.stats import binom

    rng = np.random.default_rng(5)
    misses, widths = 0, []
    trials = 200
    for trial in range(trials):
        p = [0.05, 0.3, 0.8][trial % 3]
        x = (rng.random(300) < p) * rng.uniform(0.2, 1.0, 300)  # weighted draws in [0, 1]
        mean = p * 0.6
        low, high = betting_lower_bound(x, 0.05), betting_upper_bound(x, 0.05)
        misses += (low > mean) + (high < mean)
        widths.append(high - low)
    assert misses <= binom.ppf(0.95, 2 * trials, 0.05)
    assert np.mean(widths) < 0.2
    assert betting_lower_bound(np.array([]), 0.05) == 0.0


def test_auto_picks_a_smaller_llm_only_when_it_is_much_cheaper():
    sizes = {"smollm2": 106_000_000}
    big = choose_proxy("auto", "qwen-1.5b", lambda: 1_310_000_000, sizes.get)
    assert big.spec == "smollm2" and "12.4x" in big.why
    small = choose_proxy("auto", "qwen-0.5b", lambda: 358_000_000, sizes.get)
    assert small.spec is None and "3.4x" in small.why and small.name == "embeddings"
    missing = choose_proxy("auto", "qwen-1.5b", lambda: 1_310_000_000, lambda name: None)
    assert missing.spec is None and "smollm2 is not installed" in missing.why
    assert choose_proxy("auto", "smollm2", lambda: 106_000_000, sizes.get).spec is None  # not its own proxy
    assert choose_proxy("my.gguf", "qwen", lambda: 1, sizes.get).spec == "my.gguf"
    assert choose_proxy("embeddings", "qwen", lambda: 1, sizes.get).spec is None


@pytest.fixture(scope="module")
def perturbed_tiny(tmp_path_factory):
    """Another model that mostly agrees with the tiny one: its weights plus a little noise."""
    return shaken_tiny_model(tmp_path_factory.mktemp("models") / "tiny-perturbed", noise=0.02, seed=0)


REVIEWS = (
    "CREATE TABLE r AS SELECT i, 'review ' || i || ': ' || (CASE WHEN i % 3 = 0 THEN 'great fun' WHEN i % 3 = 1 "
    "THEN 'dull and long' ELSE 'fine' END) AS txt FROM range(480) t(i)"
)


@pytest.mark.slow  # over ~2.5 s: the fast tier stays under 3 min
def test_a_proxy_llm_answers_for_the_oracle_end_to_end(tmp_path, tiny_engine, perturbed_tiny):
    """Tiny as the oracle, its perturbed copy as the proxy: the run says which proxy answered
    and why; the proxy's answers are kept under its own key, the oracle's key holds exactly
    what the oracle answered; a rerun asks neither model again; exact is unchanged."""
    import aisql
    from aisql.output import approximate_note

    # float32 by name: the proxy takes the run's engine options, and `--dtype auto` would measure
    # the perturbed model afresh in every cache dir (and might pick bfloat16, moving its scores).
    con = aisql.connect(engine=tiny_engine, cache=str(tmp_path / "cache.db"), dtype="float32")
    con.sql(REVIEWS)
    options = f"{{'proxy': '{perturbed_tiny}', 'recall': 0.8, 'precision': 0.8, 'delta': 0.1, 'sample': 160}}"
    sql = f"SELECT i FROM r WHERE AI.IF(PROMPT('Is this review positive? {{0}}', txt), {options}) ORDER BY i"
    first = con.run(sql)
    report = first.stats.nodes[0].approximate
    assert report["proxy"].endswith("tiny-perturbed") and report["proxy_why"] == "as asked" and report["sampling"] == "uniform"
    assert report["proxy_prompts"] == 480 and report["proxy_evaluated"] == 480
    assert not report["fallback_to_exact"] and report["proxy_answered"] > 0  # this seed cascades (checked: 250 rows)
    assert approximate_note(first.stats).startswith("APPROXIMATE") and "tiny-perturbed)" in approximate_note(first.stats)
    oracle_rows = report["llm_answered"]
    assert first.stats.nodes[0].prompts_evaluated == oracle_rows < 480

    store = con.session.store
    oracle_key = [k for k in _keys(store) if con.session.fingerprint() in k]
    proxy_session = con.session.proxy_session(perturbed_tiny)
    proxy_key = [k for k in _keys(store) if proxy_session.fingerprint() in k]
    assert proxy_session.fingerprint() != con.session.fingerprint()
    assert [_count(store, k) for k in oracle_key] == [oracle_rows] and [_count(store, k) for k in proxy_key] == [480]

    again = con.run(sql)
    assert again.table == first.table and again.stats.nodes[0].prompts_evaluated == 0
    assert again.stats.nodes[0].approximate["proxy_evaluated"] == 0

    exact = con.run(sql.replace(f", {options}", ""))
    naive = con.run(sql.replace(f", {options}", ""), naive=True)
    assert exact.table == naive.table and not exact.stats.is_approximate
    chosen, right = set(first.table.column("i").to_pylist()), set(exact.table.column("i").to_pylist())
    assert len(chosen & right) >= 0.8 * len(right) and len(chosen & right) >= 0.8 * len(chosen)  # the targets, this seed


def _keys(store) -> list[str]:
    return [row[0] for row in store._db.execute("SELECT DISTINCT task FROM answers").fetchall()]


def _count(store, key: str) -> int:
    return store._db.execute("SELECT count(*) FROM answers WHERE task = ?", [key]).fetchone()[0]


@pytest.mark.slow  # over ~2.5 s: the fast tier stays under 3 min
def test_explain_says_which_proxy_and_why(make_connection, perturbed_tiny):
    con = make_connection()
    con.sql(REVIEWS)
    asked = con.explain(f"SELECT i FROM r WHERE AI.IF(PROMPT('Positive? {{0}}', txt), {{'proxy': '{perturbed_tiny}'}})").to_dict()
    line = asked["statements"][0]["ai_nodes"][0]["approximate"]
    assert "proxy: " + perturbed_tiny + " (as asked), which scores all 480 prompts first" in line
    assert "the LLM answers 200 to 384" in line  # its 200-row sample at least
    staged = con.explain(f"SELECT i FROM r WHERE AI.IF(PROMPT('Positive? {{0}}', txt), {{'proxy': '{perturbed_tiny}', 'sampling': 'progressive'}})")
    assert "the LLM answers 50 to 384" in staged.to_dict()["statements"][0]["ai_nodes"][0]["approximate"]  # may stop at a quarter
    auto = con.explain("SELECT i FROM r WHERE AI.IF(PROMPT('Positive? {0}', txt), {'recall': 0.8})").to_dict()
    line = auto["statements"][0]["ai_nodes"][0]["approximate"]
    assert "proxy: embeddings (the embedding model:" in line


def test_bad_proxy_options_are_one_error(make_connection):
    from aisql.errors import AisqlError

    con = make_connection()
    con.sql(REVIEWS)
    with pytest.raises(AisqlError, match="'sampling' must be one of"):
        con.run("SELECT i FROM r WHERE AI.IF(PROMPT('Positive? {0}', txt), {'sampling': 'magic'})")
    with pytest.raises(AisqlError, match="'proxy' must be a model name"):
        con.run("SELECT i FROM r WHERE AI.IF(PROMPT('Positive? {0}', txt), {'proxy': 3})")
    with pytest.raises(AisqlError, match="does not exist|not"):
        con.run("SELECT i FROM r WHERE AI.IF(PROMPT('Positive? {0}', txt), {'proxy': '/no/such/model.gguf'})")


@pytest.mark.slow
def test_cli_proxy_model_implies_approximate_and_is_said(tmp_path, perturbed_tiny):
    """`--proxy-model` turns approximate mode on with that proxy; the label names it."""
    import json
    import subprocess
    import sys

    stats = tmp_path / "stats.json"
    sql = REVIEWS.replace("CREATE TABLE r AS ", "")
    out = subprocess.run(
        [sys.executable, "-m", "aisql.cli", "run", "-e",
         f"SELECT i FROM ({sql}) r WHERE AI.IF(PROMPT('Is this review positive? {{0}}', txt))",
         "--model", "tiny", "--dtype", "float32", "--no-cache", "--proxy-model", perturbed_tiny, "--format", "csv", "-q", "--stats-json", str(stats)],
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(stats.read_text())["nodes"][0]["approximate"]
    assert report["proxy"] == perturbed_tiny and report["proxy_prompts"] == 480
    assert "APPROXIMATE" in out.stderr or "approximate mode fell back" in out.stderr


@pytest.mark.slow  # over ~2.5 s: the fast tier stays under 3 min
def test_smollm2s_size_is_read_from_its_gguf_header_without_loading_it():
    from aisql.executor.approximate.proxy_choice import installed_decoder_params

    params = installed_decoder_params("smollm2")
    if params is None:
        pytest.skip("smollm2 not installed")
    assert 100e6 < params < 110e6  # SmolLM2-135M: 106M in its 30 blocks, the rest embeddings
    assert installed_decoder_params("not-a-candidate") is None


def test_a_proxys_pilot_rows_are_scored_once_and_counted_once():
    """The pilot scores the sample's first rows, then the full pass scores every row: the
    proxy's model sees each text once and its counts are the node's, not the last call's."""
    from aisql.executor.store.answer_store import Answer
    from aisql.executor.answers.answering import AnswerCounts
    from aisql.executor.node.approximate_node import ProxyScorer

    asked: list[list[str]] = []

    class Answering:
        def answer_texts(self, counts, task, *, seen, progress):
            asked.append(list(counts))
            new = [t for t in counts if t not in seen]
            seen.update(new)
            return {t: Answer(True, cost=1, p_yes=0.5) for t in counts}, AnswerCounts(prompts_total=len(counts), prompts_unique=len(new), prompts_evaluated=len(counts))

    class Session:
        def answering(self, options):
            return Answering()

        def model_name(self):
            return "fake-proxy"

    from aisql.executor.answers.answer_types import RunOptions

    scorer = ProxyScorer(Session(), task=None, node_id="n1", description="AI.IF", options=RunOptions.of(checkpoint_every=256, checkpoint_seconds=5.0))
    texts = [f"t{i}" for i in range(100)]
    assert scorer(texts[:10]) == {t: 0.5 for t in texts[:10]}
    assert scorer(texts) == {t: 0.5 for t in texts}
    assert [len(batch) for batch in asked] == [10, 90]
    assert scorer.counts.prompts_unique == 100 and scorer.counts.prompts_evaluated == 100


def test_unload_frees_the_oracle_and_its_proxies(tmp_path, perturbed_tiny):
    """A benchmark running one large model after another gets the memory back now; a later
    call loads the model again."""
    import aisql

    con = aisql.connect(model=perturbed_tiny, cache=str(tmp_path / "cache.db"), dtype="float32")
    proxy = con.session.proxy_session(perturbed_tiny)
    oracle_engine, proxy_engine = con.session.engine, proxy.engine
    assert con.session.loaded and proxy.loaded
    con.session.unload()
    assert not con.session.loaded and not proxy.loaded
    assert con.session.engine is not oracle_engine and con.session.proxy_session(perturbed_tiny) is not proxy
    del proxy_engine


@pytest.mark.slow  # the proxy scores 480 prompts
def test_a_proxys_prompts_count_against_the_runs_budget(tmp_path, tiny_engine, perturbed_tiny):
    """Issue 58, cause 17: the proxy LLM's prompts escaped --max-prompts (the proxy took its own
    options, without the run's budget). They are paid for: a limit the plan fits (480 prompts)
    but the proxy's 480 and the oracle's answers together cross stops the run at the limit, with
    what was answered kept; a rerun with room asks only the rest."""
    import aisql
    from aisql.executor.options.budget import BudgetExceeded

    con = aisql.connect(engine=tiny_engine, cache=str(tmp_path / "cache.db"), dtype="float32")
    con.sql(REVIEWS)
    options = f"{{'proxy': '{perturbed_tiny}', 'recall': 0.8, 'precision': 0.8, 'delta': 0.1, 'sample': 160}}"
    sql = f"SELECT i FROM r WHERE AI.IF(PROMPT('Is this review positive? {{0}}', txt), {options}) ORDER BY i"
    with pytest.raises(BudgetExceeded, match="stopped after 500 new prompts"):
        con.run(sql, max_prompts=500, checkpoint_every=60)
    store = con.session.store
    proxy_key, oracle_key = con.session.proxy_session(perturbed_tiny).fingerprint(), con.session.fingerprint()
    proxy_kept = sum(_count(store, k) for k in _keys(store) if proxy_key in k)
    oracle_kept = sum(_count(store, k) for k in _keys(store) if oracle_key in k)
    assert proxy_kept + oracle_kept == 500 and proxy_kept > 400  # every prompt paid for is kept, most of them the proxy's
    resumed = con.run(sql)
    assert resumed.stats.nodes[0].approximate["proxy_evaluated"] == 480 - proxy_kept  # only the rest
    assert resumed.stats.nodes[0].prompts_cached > 0  # the oracle answers paid for are read back


@pytest.mark.slow
def test_a_proxy_reads_the_runs_overflow_mode(tiny_engine, perturbed_tiny):
    """Issue 58, cause 17, the sibling: the proxy ignored --on-overflow; with 'truncate' a row
    longer than the context is truncated for the proxy as for the oracle, never an error."""
    import aisql
    from aisql.executor.answers.evaluate import ContextOverflow

    con = aisql.connect(engine=tiny_engine, cache=False, dtype="float32")
    con.sql(REVIEWS)
    con.duckdb.execute("INSERT INTO r VALUES (480, ?)", ["lorem ipsum dolor sit amet " * 2000])
    sql = f"SELECT i FROM r WHERE AI.IF(PROMPT('Is this review positive? {{0}}', txt), {{'proxy': '{perturbed_tiny}', 'sample': 160}}) ORDER BY i"
    with pytest.raises(ContextOverflow, match="does not fit the model's context"):
        con.run(sql)
    done = con.run(sql, on_overflow="truncate")
    assert done.stats.nodes[0].approximate["proxy_prompts"] == 481
