"""The proxy-LLM cascade's samplings on synthetic two-model signals: how many rows reach the
oracle, and how often the targets are missed, as the proxy's agreement with the oracle varies.

    python benchmarks/cascade_signals.py [--seeds 100]

A signal: 2,000 (or 5,000) rows, 76% positive for the oracle (SemBench's share), the proxy's
P(yes) a logistic of separation * (+-1) + normal noise (sd 1.5): separation 1 is a weak proxy
(AUC ~0.8), 2 a good one (~0.95), 3 a close one (~0.99). Targets 0.9 / 0.9 / delta 0.05 against
the oracle. No model runs: the oracle's answers and the proxy's scores are the signal itself, so
this measures the statistics alone (aisql.executor.approximate.score_first). Results:
results/cascade_signals.json; RESULTS.md §26.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from scipy.stats import binom
from sklearn.metrics import roc_auc_score

from aisql.executor.approximate.score_first import run_score_first
from aisql.planner.approximation import Targets

HERE = Path(__file__).resolve().parent


def signal(rows: int, separation: float, seed: int = 1):
    rng = np.random.default_rng(seed)
    truth = rng.random(rows) < 0.76
    scores = 1 / (1 + np.exp(-(separation * (2 * truth - 1) + rng.normal(0, 1.5, rows) + 0.5)))
    texts = [f"row {i:06d}" for i in range(rows)]
    return texts, dict(zip(texts, truth.tolist())), dict(zip(texts, scores.tolist())), roc_auc_score(truth, scores)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=100)
    args = parser.parse_args()
    out = []
    for rows, separation in ((2000, 1.0), (2000, 2.0), (5000, 2.0), (5000, 3.0)):
        texts, truth, scores, auc = signal(rows, separation)
        for sampling in ("uniform", "progressive", "importance"):
            shares, failures = [], 0
            for seed in range(args.seeds):
                answers, report = run_score_first(
                    texts, Targets(seed=seed), ask_llm=lambda b: {t: truth[t] for t in b}, proxy_scores=lambda b: {t: scores[t] for t in b}, sampling=sampling
                )
                tp = sum(1 for t in texts if answers[t] and truth[t])
                recall, precision = tp / sum(truth.values()), tp / max(1, sum(1 for a in answers.values() if a))
                failures += recall < 0.9 or precision < 0.9
                shares.append(report.llm_rows / rows)
            row = {
                "rows": rows, "separation": separation, "proxy_auc": round(auc, 3), "sampling": sampling,
                "oracle_share_mean": round(float(np.mean(shares)), 3), "failures": failures,
                "failures_allowed_95": int(binom.ppf(0.95, args.seeds, 0.05)), "seeds": args.seeds,
            }
            out.append(row)
            print(json.dumps(row), flush=True)
    (HERE / "results" / "cascade_signals.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
