"""Run statistics are exact: checked against an independent count with DuckDB and the tokenizer."""

from __future__ import annotations

import json

import duckdb
from click.testing import CliRunner
from conftest import EXAMPLES

from aisql.cli import main
from aisql.functions.ai_if import FRAMING as IF_INSTRUCTION
from aisql.sql import SourceText, bind_statement, parse_script


def test_hot_leads_stats_by_counting(tiny_engine, tmp_path, monkeypatch):
    monkeypatch.chdir(EXAMPLES.parent)
    stats_path = tmp_path / "stats.json"
    result = CliRunner().invoke(
        main, ["run", "examples/hot_leads.sql", "--model", "tiny", "--stats-json", str(stats_path), "-q", "--format", "csv", "--no-cache"]
    )
    assert result.exit_code == 0, result.output
    stats = json.loads(stats_path.read_text())

    con = duckdb.connect()
    pairs = con.execute(
        f"""SELECT c.profile, p.description
            FROM read_csv_auto('{EXAMPLES}/data/customers.csv') c, read_csv_auto('{EXAMPLES}/data/products.csv') p
            WHERE c.country = 'Germany' AND p.price < 100"""
    ).fetchall()
    texts = [f"{profile} might buy this: {description}" for profile, description in pairs]
    tails = sum(len(tiny_engine.encode_label(label, IF_INSTRUCTION)) - 1 for label in ("Yes", "No"))
    lengths = {t: len(tiny_engine.encode_prompt(IF_INSTRUCTION, t)) + tails for t in set(texts)}

    assert stats["model"] == "tiny" and "meaningless" in stats["model_note"]
    assert stats["prompts_total"] == len(pairs) == 190
    assert stats["prompts_unique"] == len(set(texts))
    assert stats["prompts_evaluated"] == len(set(texts))
    assert stats["logical_tokens"] == sum(lengths[t] for t in texts)
    # A fresh engine computes each distinct token prefix exactly once: the prefix-tree minimum.
    prompts = tiny_engine.encode_prompts(IF_INSTRUCTION, sorted(set(texts)))
    assert stats["computed_tokens"] == prefix_tree_size(prompts) + tails * len(prompts)
    assert stats["kv_regret_tokens"] == 0
    # Each prompt reads from the cache what it shares with another prompt (its last token it runs).
    by_text = dict(zip(sorted(set(texts)), prompts))
    shared = longest_shared_prefix(prompts)
    assert stats["kv_hit_tokens"] == sum(min(shared[by_text[t]], len(by_text[t]) - 1) for t in texts)
    assert stats["prompts_unique"] <= stats["prompts_total"]
    assert stats["computed_tokens"] <= stats["logical_tokens"]
    (node,) = stats["nodes"]
    assert node["prompts_total"] == stats["prompts_total"] and node["wall_s"] >= 0
    assert stats["wall_s"] > 0


def longest_shared_prefix(prompts) -> dict:
    """For each prompt, its longest common prefix with any other prompt (neighbours in sorted order)."""
    ordered = sorted(set(prompts))

    def lcp(a, b):
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    out = {}
    for i, p in enumerate(ordered):
        neighbours = [ordered[j] for j in (i - 1, i + 1) if 0 <= j < len(ordered)]
        out[p] = max((lcp(p, q) for q in neighbours), default=0)
    return out


def prefix_tree_size(prompts) -> int:
    """Distinct token prefixes among the prompts: the fewest positions any engine must compute."""
    return len({tuple(p[:i]) for p in prompts for i in range(1, len(p) + 1)})


def test_dedup_counts_with_repeated_values(make_connection, tiny_engine):
    from aisql.engine import load_engine

    sql = "SELECT id, AI.CLASSIFY(review, ['positive', 'negative', 'neutral']) AS s FROM reviews"
    result = make_connection(engine=load_engine("tiny")).run(sql)
    reviews = [r[0] for r in duckdb.connect().execute(f"SELECT review FROM read_csv_auto('{EXAMPLES}/data/reviews.csv')").fetchall()]
    source = SourceText(sql)
    (call,) = bind_statement(parse_script(source)[0], source, "__x_").calls
    task = call.task
    labels = [tiny_engine.encode_label(l, task.framing) for l in task.labels]
    tails = sum(len(l) - 1 for l in labels)
    cost = {t: len(tiny_engine.encode_prompt(task.framing, t)) + tails for t in set(reviews)}

    (node,) = result.stats.nodes
    assert node.prompts_total == len(reviews) == 120
    assert node.prompts_unique == len(set(reviews)) < 20
    assert node.logical_tokens == sum(cost[t] for t in reviews)
    prompts = tiny_engine.encode_prompts(task.framing, sorted(set(reviews)))
    assert node.computed_tokens == prefix_tree_size(prompts) + tails * len(set(reviews))
    assert node.computed_tokens * 10 < node.logical_tokens  # 120 rows, under 20 distinct texts
    assert node.kv_regret_tokens == 0
