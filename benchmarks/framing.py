"""Which framing lets a small real model answer AI.IF: candidate framings measured on dev data.

    python benchmarks/framing.py [--model smollm2|qwen-0.5b|qwen-1.5b] [--reviews 120]

A framing is what surrounds the user's prompt: system message, suffix, the start of the answer,
the two answer labels. Each candidate scores every dev prompt in one forward pass; the answer is
the more likely label (threshold 0 on log P(yes) - log P(no)), optionally after contextual
calibration (Zhao et al. 2021: subtract the score of the same template filled with a
content-free value, "N/A"). Reported per dev set: accuracy raw / calibrated, and AUC (how well the
score separates the classes at any threshold). Dev sets: SemBench movie reviews (a seeded random
sample, ~75% positive) under two phrasings — BigQuery's "Determine if the following movie review
is clearly positive, review: ..." and a question — 20 short unambiguous reviews written for this
benchmark (not the test's cases), and the five GGR tasks with benchmarks/accuracy.py's prompts
(AI.CLASSIFY framings on `products`).
Results: results/framing_<model>.json; the choice (aisql.functions.ai_if) is justified in
RESULTS.md §10.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
from pathlib import Path

from aisql.engine import ScoreRequest, load_engine
from aisql.engine.model.prompt_format import Framing

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
YES_NO = "Answer the question with Yes or No."

# name -> (framing, (label for yes, label for no))
CANDIDATES = {
    "system TRUE/FALSE (aisql 0.1)": (
        Framing("You are a careful data analyst. Decide whether the statement about the data is true. Answer TRUE or FALSE only."),
        ("TRUE", "FALSE"),
    ),
    "system 'Answer Yes or No', Yes/No": (Framing(YES_NO), ("Yes", "No")),
    "default system, reply 'The answer is:' Yes/No (chosen)": (Framing(None, answer_prefix="The answer is:", label_prefix=" "), ("Yes", "No")),
    "reply 'The statement is' true/false": (
        Framing("Decide whether the statement is true or false.", answer_prefix="The statement is", label_prefix=" "),
        ("true", "false"),
    ),
}

SHORT = [(t, True) for t in [
    "Loved it, a wonderful film.", "Great fun and very well made.", "One of the finest movies this year.",
    "Charming, clever and beautifully shot.", "An excellent, satisfying story.", "Superb performances all round.",
    "A delight for the whole family.", "Thrilling and smart; I enjoyed it a lot.", "A fantastic cast in a terrific movie.",
    "Warm, witty and wise.",
]] + [(t, False) for t in [
    "Awful. Do not bother.", "Boring and far too long.", "A dreadful, lazy sequel.", "Poorly written and badly directed.",
    "I regret watching this.", "Tedious, silly and forgettable.", "An ugly, mean-spirited film.", "The plot makes no sense at all.",
    "Flat jokes and wooden acting.", "A dull mess from start to end.",
]]
BQ = "Determine if the following movie review is clearly positive, review: {x}"
QUESTION = "Is the following movie review positive? {x}"


def sembench(count: int, seed: int = 0) -> list[tuple[str, bool]]:
    with open(DATA / "sembench_movie" / "Reviews.csv", newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["reviewText"].strip()]
    random.Random(seed).shuffle(rows)
    return [(r["reviewText"], r["scoreSentiment"] == "POSITIVE") for r in rows[:count]]


def auc(scores: list[float], truth: list[bool]) -> float:
    pos = [s for s, t in zip(scores, truth) if t]
    neg = [s for s, t in zip(scores, truth) if not t]
    return sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))


CLASSIFY_CANDIDATES = {
    "system instruction listing the categories (chosen)": lambda listed: Framing(
        f"You are a careful data analyst. Classify the input into exactly one of these categories: {listed}. Answer with the category only."
    ),
    "default system, categories after the text, reply 'The answer is:'": lambda listed: Framing(
        None, suffix=f"\n\nAnswer with one of these categories: {listed}.", answer_prefix="The answer is:", label_prefix=" "
    ),
    "system instruction, reply 'The answer is:'": lambda listed: Framing(
        f"Classify the text into one of these categories: {listed}. Answer with the category only.", answer_prefix="The answer is:", label_prefix=" "
    ),
}


def ggr_sets() -> dict:
    """The GGR tasks with accuracy.py's prompts: name -> (texts, truth, labels or None)."""
    from accuracy import GGR, ggr_table

    from aisql.sql.template import parse_template

    out = {}
    for name, spec in GGR.items():
        table, labels = ggr_table(name)
        rows = table.to_pylist()
        template = parse_template(spec["template"])
        texts = [template.render([str(row[p.column]) for p in template.placeholders]) for row in rows]
        truth = [label["manual_labels"] for label in labels]
        out[name] = (texts, truth, spec.get("labels"))
    return out


def evaluate_texts(engine, framing: Framing, labels, texts, content_free: str) -> tuple[list[list[float]], list[float]]:
    label_ids = tuple(engine.encode_label(label, framing) for label in labels)
    out = engine.score([ScoreRequest(ids, label_ids) for ids in engine.encode_prompts(framing, list(texts) + [content_free])])
    return [list(o.logprobs) for o in out[:-1]], list(out[-1].logprobs)


def main() -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--reviews", type=int, default=120)
    args = parser.parse_args()
    from common import model_argument

    engine = load_engine(model_argument(args.model))  # qwen-0.5b / qwen-1.5b: the reference GGUFs
    reviews = sembench(args.reviews)
    ggr = ggr_sets()
    sets = {
        "sembench, BigQuery phrasing": ([BQ.format(x=x) for x, _ in reviews], [t for _, t in reviews], BQ.format(x="N/A")),
        "sembench, question": ([QUESTION.format(x=x) for x, _ in reviews], [t for _, t in reviews], QUESTION.format(x="N/A")),
        "short unambiguous, question": ([QUESTION.format(x=x) for x, _ in SHORT], [t for _, t in SHORT], QUESTION.format(x="N/A")),
        "short unambiguous, BigQuery phrasing": ([BQ.format(x=x) for x, _ in SHORT], [t for _, t in SHORT], BQ.format(x="N/A")),
    }
    from accuracy import GGR

    from aisql.sql.template import parse_template

    for name, (texts, truth, labels) in ggr.items():
        if labels is None and name != "posts":  # posts' long bodies: measured by accuracy.py, too slow to sweep here
            template = parse_template(GGR[name]["template"])
            sets[f"GGR {name}"] = (texts, [t == "YES" for t in truth], template.render(["N/A"] * template.arity))
    results: dict = {"AI.IF": {}, "AI.CLASSIFY": {}}
    for name, (framing, labels) in CANDIDATES.items():
        per_set = {}
        for set_name, (texts, truth, content_free) in sets.items():
            scores, free = evaluate_texts(engine, framing, labels, texts, content_free)
            margin = [s[0] - s[1] for s in scores]
            shift = free[0] - free[1]
            per_set[set_name] = {
                "accuracy": round(sum((m > 0) == t for m, t in zip(margin, truth)) / len(truth), 3),
                "accuracy_calibrated": round(sum((m - shift > 0) == t for m, t in zip(margin, truth)) / len(truth), 3),
                "auc": round(auc(margin, truth), 3),
                "yes_rate": round(sum(m > 0 for m in margin) / len(margin), 3),
            }
        per_set["mean"] = {k: round(sum(r[k] for r in per_set.values()) / len(sets), 3) for k in ("accuracy", "accuracy_calibrated", "auc")}
        results["AI.IF"][name] = per_set
        print(f"IF {name:62} " + " ".join(f"{k} {v:.3f}" for k, v in per_set["mean"].items()), flush=True)
    texts, truth, labels = ggr["products"]
    template = parse_template(GGR["products"]["template"])
    content_free = template.render(["N/A"] * template.arity)
    for name, make in CLASSIFY_CANDIDATES.items():
        framing = make(", ".join(labels))
        scores, free = evaluate_texts(engine, framing, labels, texts, content_free)
        raw = [labels[max(range(len(labels)), key=s.__getitem__)] for s in scores]
        calibrated = [labels[max(range(len(labels)), key=lambda i: s[i] - free[i])] for s in scores]
        results["AI.CLASSIFY"][name] = {
            "accuracy": round(sum(p == t for p, t in zip(raw, truth)) / len(truth), 3),
            "accuracy_calibrated": round(sum(p == t for p, t in zip(calibrated, truth)) / len(truth), 3),
            "predicted": {label: raw.count(label) for label in labels},
        }
        print(f"CLASSIFY {name:56} {results['AI.CLASSIFY'][name]}", flush=True)
    path = Path(__file__).resolve().parent / "results" / f"framing_{args.model.replace('/', '_')}.json"
    path.write_text(json.dumps({"model": args.model, "reviews": args.reviews, "positives": sum(t for _, t in reviews), "results": results}, indent=2) + "\n")
    print(f"written {path}")


if __name__ == "__main__":
    main()
