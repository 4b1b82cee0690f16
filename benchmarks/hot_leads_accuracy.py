"""The README's main example scored against its ground truth: examples/hot_leads.sql's answers
(Germany's customer x product pairs under 100) against examples/data/leads.py, with the model's
own answers and with k of the labelled pairs in examples/data/hot_leads_labels.csv (customers
outside Germany: the answered pairs are never among the examples).

    python benchmarks/hot_leads_accuracy.py [--model smollm2|qwen-0.5b] [--examples 0,8,16,32]

Each run goes through the product (`aisql.connect(...).run`, planned, one result cache file per
model: later runs ask only the examples they add). Reported per k: precision, recall and F1 of
the leads found, balanced accuracy, the Yes share, the rule the examples chose, and the work.
Results: results/hot_leads_accuracy_<model>.json (RESULTS.md §37).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "data"))

import aisql  # noqa: E402
from leads import is_lead  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
EXAMPLES = "examples => (SELECT profile, description, label FROM 'data/hot_leads_labels.csv' LIMIT {k})"
TEMPLATE = "{c.profile} might buy this: {p.description}"
QUERY = (
    "SELECT c.profile, p.name AS product, {call} AS lead "
    "FROM 'data/customers.csv' AS c, 'data/products.csv' AS p WHERE c.country = 'Germany' AND p.price < 100"
)


def scored(rows: list[dict]) -> dict:
    """The answers against the ground truth (decisions.binary's figures)."""
    from decisions import binary

    truth = [is_lead(r["profile"], r["product"]) for r in rows]
    said = [bool(r["lead"]) for r in rows]
    figures = binary(said, truth)
    return {"pairs": len(rows), "leads": sum(truth), "said_yes": sum(said), "precision": round(figures["precision"], 4), "recall": round(figures["recall"], 4),
            "f1": round(figures["f1"], 4), "balanced_accuracy": round(figures["bacc"], 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--examples", default="0,8,16,32")
    parser.add_argument("--template", default=TEMPLATE, help="the prompt (hot_leads.sql's by default)")
    args = parser.parse_args()
    from common import model_argument

    cache = RESULTS / f"hot_leads_cache_{args.model.replace('/', '_')}.db"
    con = aisql.connect(model=model_argument(args.model), cache=str(cache))
    out = {"model": args.model, "template": args.template, "runs": []}
    for k in (int(x) for x in args.examples.split(",")):
        options = f", {EXAMPLES.format(k=k)}" if k else ""
        call = f"AI.IF(PROMPT('{args.template}'){options})"
        started = time.perf_counter()
        here = os.getcwd()
        os.chdir(ROOT / "examples")
        try:
            result = con.run(QUERY.format(call=call))
        finally:
            os.chdir(here)
        node = result.stats.nodes[0]
        entry = {"examples": k, **scored(result.table.to_pylist()), "wall_s": round(time.perf_counter() - started, 2),
                 "prompts_evaluated": node.prompts_evaluated, "rule": (node.decision or {}).get("rule"), "model": result.stats.model}
        out["runs"].append(entry)
        print(json.dumps(entry))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"hot_leads_accuracy_{args.model.replace('/', '_')}.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
