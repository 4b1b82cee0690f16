"""The query benchmark: Q1-Q4 naive and planned on the same engine, in one process.

    python benchmarks/run.py [--scale 1] [--model tiny-32k] [--repeat 1] [--only Q1,Q2]

For each query: `aisql explain` estimates (selectivities sampled on 16 prompts), then a naive run
(one prompt per row, no dedup, no reuse) and a planned run, each from a cold cache. Written to
benchmarks/results/<query>.json: prompts, logical and computed tokens, KV regret, wall time, the
prefix-tree minimum of the prompts the planned run sent, explain's estimate, and the ratios.
Targets (default scale, this CPU, tiny 32k-vocabulary model): planned == naive on every query;
Q1 >= 5x faster than naive; computed tokens within 5% of the prefix-tree minimum on Q1-Q3;
explain's computed-token estimate (its plan plus the tokens its selectivity samples cost, which a
run on explain's own connection would not pay again) within 20% of the measured value.
"""

from __future__ import annotations

import argparse
import json
import time

from common import bench_engine, bench_engine_small, machine, write
from datagen import tables

import aisql
from aisql.engine import load_engine

QUERIES = {
    "Q1_hot_leads": """
        SELECT c.id AS customer, p.id AS product
        FROM customers c JOIN products p
          ON AI.IF(PROMPT('{c.profile} might buy this: {p.description}'))
        WHERE c.segment = 'retail' AND p.price < 150""",
    "Q2_reviews": """
        SELECT id FROM reviews
        WHERE rating <= 3
          AND AI.IF(PROMPT('Review: {text} Question: does the reviewer complain about the delivery?'))
          AND AI.IF(PROMPT('Review: {text} Question: is the tone of the review hostile?'))""",
    "Q3_classify": """
        SELECT AI.CLASSIFY(PROMPT('Which kind of product is this review about? {text}'),
                           ['kitchen', 'outdoor', 'electronics', 'other']) AS kind,
               count(*) AS reviews
        FROM review_pool GROUP BY 1""",
    "Q4_bio": """
        SELECT r.id AS report, d.term AS condition, m.term AS drug
        FROM reports r
        JOIN terms d ON d.kind = 'condition'
          AND AI.IF(PROMPT('Report: {r.text} Question: does the report mention {d.term}?'))
        JOIN terms m ON m.kind = 'drug'
          AND AI.IF(PROMPT('Report: {r.text} Question: was the patient given {m.term}?'))
        WHERE AI.IF(PROMPT('Report: {r.text} Question: does the patient have cancer?'))""",
}


class Recorder:
    """The engine, recording every token sequence the model must run for the requests it gets:
    prompt + each label's tail when scoring, prompt + the generated tokens when generating. Their
    prefix tree is the least work any engine can do for those requests."""

    def __init__(self, engine) -> None:
        self._engine = engine
        self.sequences: set[tuple[int, ...]] = set()

    def score(self, requests, **kwargs):
        for r in requests:
            self.sequences.update(tuple(r.prompt_ids) + tuple(label[:-1]) for label in r.label_ids)
        return self._engine.score(requests, **kwargs)

    def generate(self, requests, **kwargs):
        out = self._engine.generate(requests, **kwargs)
        for r, g in zip(requests, out):
            self.sequences.add(tuple(r.prompt_ids) + tuple(g.token_ids[:-1]) if g.token_ids else tuple(r.prompt_ids))
        return out

    def __getattr__(self, name):
        return getattr(self._engine, name)


def connection(engine, data, cache=False) -> aisql.Connection:
    """Tables loaded into DuckDB; by default no result cache (measure the engine, not the cache)."""
    con = aisql.Connection(engine=engine, cache=cache)
    for name, table in data.items():
        con.duckdb.register(f"__{name}", table)
        con.duckdb.execute(f"CREATE TABLE {name} AS SELECT * FROM __{name}")
    return con


def run_once(engine, data, sql: str, naive: bool, fixed_chunks: bool = False) -> dict:
    engine.reset_cache()  # every run starts cold
    recorder = Recorder(engine)
    con = connection(recorder, data)
    started = time.perf_counter()
    # fixed chunks: checkpoints by prompt count only, so the passes and prefix hits are a function of
    # the code, not of the machine's speed at the moment (compare two versions of the engine)
    result = con.run(sql, naive=naive, **({"checkpoint_seconds": 1e9} if fixed_chunks else {}))
    wall = time.perf_counter() - started
    con.close()
    t = result.stats.totals()
    return {
        "wall_s": round(wall, 3),
        "rows_out": result.table.num_rows,
        "prompts_total": t["prompts_total"],
        "prompts_evaluated": t["prompts_evaluated"],
        "prompts_sampled": t["prompts_sampled"],
        "logical_tokens": t["logical_tokens"],
        "computed_tokens": t["computed_tokens"],
        "kv_hit_tokens": t["kv_hit_tokens"],
        "kv_regret_tokens": t["kv_regret_tokens"],
        "padding_tokens": t["padding_tokens"],
        "forward_passes": t["forward_passes"],
        "flops": t["flops"],
        "order": [n.function for n in result.stats.nodes],
        "_rows": sorted(map(repr, result.table.to_pylist())),
        "_sequences": recorder.sequences,
    }


def prefix_tree_size(sequences) -> int:
    return len({s[:i] for s in sequences for i in range(1, len(s) + 1)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--model", default="tiny-32k", help="tiny-32k (default), tiny-32k-small, tiny, or any model spec")
    parser.add_argument("--repeat", type=int, default=1, help="runs per mode; the fastest is kept")
    parser.add_argument("--only", help="comma-separated query names (prefixes), e.g. Q1,Q4")
    parser.add_argument("--fixed-chunks", action="store_true", help="checkpoint by prompt count only: every work counter deterministic (to compare versions)")
    parser.add_argument("--blurbs", action="store_true", help="Q1 with full product blurbs instead of taglines (a longer tail)")
    args = parser.parse_args()
    engines = {"tiny-32k": bench_engine, "tiny-32k-small": bench_engine_small}
    engine = engines[args.model]() if args.model in engines else load_engine(args.model)
    data = tables(args.scale, blurbs=args.blurbs)
    chosen = [q for q in QUERIES if not args.only or any(q.startswith(o) for o in args.only.split(","))]
    print(f"{'query':14} {'naive s':>8} {'plan s':>7} {'speedup':>8} {'logical':>9} {'computed':>9} {'minimum':>8} {'estimate':>9} {'est.err':>7} {'equal':>6}")
    summary = {}
    for name in chosen:
        sql = QUERIES[name]
        explain_con = connection(engine, data)
        engine.reset_cache()
        before = engine.stats.computed_tokens
        explanation = explain_con.explain(sql, sample=16)
        # explain's selectivity samples are answered now and reused by a run on its connection (the
        # plan then prices only the rest); the runs below are on fresh connections and pay for them
        sampling_tokens = engine.stats.computed_tokens - before
        explain_con.close()
        estimate = explanation.to_dict()["statements"][-1]["totals"]
        run_once(engine, data, sql, naive=False, fixed_chunks=args.fixed_chunks)  # warm-up
        naive = min((run_once(engine, data, sql, naive=True, fixed_chunks=args.fixed_chunks) for _ in range(args.repeat)), key=lambda r: r["wall_s"])
        planned = min((run_once(engine, data, sql, naive=False, fixed_chunks=args.fixed_chunks) for _ in range(args.repeat)), key=lambda r: r["wall_s"])
        equal = naive.pop("_rows") == planned.pop("_rows")
        naive.pop("_sequences")
        minimum = prefix_tree_size(planned.pop("_sequences"))
        est = estimate["plan"]["tokens"] + sampling_tokens
        record = {
            "query": name,
            "sql": " ".join(sql.split()),
            "scale": args.scale,
            "product_text": "blurbs" if args.blurbs else "taglines",
            "model": engine.info.name,
            "machine": machine(),
            "planned_equals_naive": equal,
            "naive": naive,
            "planned": planned,
            "prefix_tree_minimum": minimum,
            "explain": {"plan": estimate["plan"], "naive": estimate["naive"], "sampling_tokens": sampling_tokens},
            "ratios": {
                "wall_speedup": round(naive["wall_s"] / planned["wall_s"], 2),
                "computed_tokens_naive_over_planned": round(naive["computed_tokens"] / max(1, planned["computed_tokens"]), 2),
                "computed_over_minimum": round(planned["computed_tokens"] / max(1, minimum), 4),
                "estimate_error": round(abs(est - planned["computed_tokens"]) / max(1, planned["computed_tokens"]), 4),
            },
        }
        if args.blurbs:
            name += "_blurbs"
        if args.model != "tiny-32k":
            name += f"_{args.model.replace('/', '_')}"
        record["query"] = name
        write(name, record)
        summary[name] = record["ratios"] | {"planned_equals_naive": equal}
        r = record["ratios"]
        print(
            f"{name:14} {naive['wall_s']:8.2f} {planned['wall_s']:7.2f} {r['wall_speedup']:7.1f}x {planned['logical_tokens']:9} "
            f"{planned['computed_tokens']:9} {minimum:8} {est:9} {r['estimate_error']:7.1%} {equal!s:>6}"
        )
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
