"""Decision quality against human labels: where aisql places each answer given the model's label
probabilities — the likeliest label, label-free calibrations, rules fitted on labelled examples —
on every labelled task and model (issue 41).

    python benchmarks/decision_tasks.py --model M          # once per model: the rows' probabilities, through aisql
    python benchmarks/decisions.py [--seeds 40]            # every figure below, from those files

The per-row label log-probabilities come from `decision_tasks.py` (aisql's planned run, its
result cache read back); this script asks no model. For each yes/no task it reports the AUC of
P(Yes) against the labels and, for each rule, balanced accuracy, F1 of the positive class,
precision, recall and the Yes share:
- `argmax`: the likeliest label (today's default);
- `content_free`: the mean P(Yes) of the three content-free inputs as the threshold (Zhao et al.
  2021), and each input alone; `batch`: the mean P(Yes) of the task's own rows (Zhou et al. 2024);
  `cf+batch`: halfway between the two;
- `examples k`: k labelled rows (k/2 per class) drawn from the task's rows, the rule fitted on
  them, scored on the rows not drawn; a mean over `--seeds` seeded draws with its 95% interval.
  `aisql` is the product's rule (aisql.functions.decision.fit_bias: a bias-only logistic
  regression, kept only when it beats argmax on the examples held out one at a time); the others
  are the candidates it was chosen from (with no check, the same check, ties kept, or kept when
  the examples' own AUC reaches 0.6-0.7);
- `hindsight`: the best threshold for the scored rows themselves (a ceiling, not a rule).
AI.CLASSIFY (GGR products: per-class one-vs-rest AUC, accuracy, macro-F1) and AI.SCORE (SemBench
Q9's rubric vs the critics' own scores: Spearman, mean absolute error) are reported with and
without examples. Label-free signals (the Yes share, the spread of P(Yes)) are set beside each
task's AUC, to choose the warnings by. GGR's GPT-4o and Llama-3 answers are scored on the same rows.
Results: results/decisions.json; the tables go to stdout (RESULTS.md §27).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import statistics
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aisql.functions import by_name  # noqa: E402
from aisql.functions import decision  # noqa: E402
from aisql.functions.ai_classify import ClassifyOptions  # noqa: E402
from aisql.functions.ai_score import ScoreOptions  # noqa: E402
from aisql.functions.base import Options  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
MODELS = ("smollm2", "qwen-0.5b", "qwen-1.5b")
GATED_TASKS = ("sembench", "pdmx", "beer")  # AI.IF tasks whose classes keep >= 30 rows after 8 per class are drawn
GATED_MODELS = ("qwen-0.5b", "qwen-1.5b")
EXAMPLE_SIZES = (8, 16, 32)


# ---- metrics -----------------------------------------------------------------------------------
def auc(scores: list[float], truth: list[bool]) -> float | None:
    """Area under the ROC curve (ties count half): the chance a positive outscores a negative."""
    pos = [s for s, t in zip(scores, truth) if t]
    neg = [s for s, t in zip(scores, truth) if not t]
    if not pos or not neg:
        return None
    order = np.argsort(np.array(scores), kind="mergesort")
    ranks = np.empty(len(scores))
    values = np.array(scores)[order]
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    positive_ranks = sum(r for r, t in zip(ranks, truth) if t)
    return float((positive_ranks - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def binary(predicted: list[bool], truth: list[bool]) -> dict:
    tp = sum(p and t for p, t in zip(predicted, truth))
    fp = sum(p and not t for p, t in zip(predicted, truth))
    fn = sum(t and not p for p, t in zip(predicted, truth))
    tn = len(truth) - tp - fp - fn
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    specificity = tn / (tn + fp) if tn + fp else 0.0
    return {
        "bacc": (recall + specificity) / 2,
        "f1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
        "precision": precision,
        "recall": recall,
        "accuracy": (tp + tn) / len(truth),
        "yes_share": (tp + fp) / len(truth),
    }


def at_threshold(p: list[float], truth: list[bool], threshold: float) -> dict:
    return binary([x >= threshold for x in p], truth)


def hindsight(p: list[float], truth: list[bool]) -> dict:
    """The best balanced accuracy any threshold reaches on these very rows (a ceiling)."""
    best = max((at_threshold(p, truth, t) for t in sorted(set(p)) + [1.1]), key=lambda m: m["bacc"])
    return best


def spearman(x: list[float], y: list[float]) -> float:
    def ranks(values):
        order = sorted(range(len(values)), key=values.__getitem__)
        out = [0.0] * len(values)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for k in range(i, j + 1):
                out[order[k]] = (i + j) / 2
            i = j + 1
        return out

    rx, ry = ranks(x), ranks(y)
    return float(np.corrcoef(rx, ry)[0, 1]) if len(set(rx)) > 1 and len(set(ry)) > 1 else 0.0


def mean_interval(values: list[float]) -> dict:
    """Mean and its 95% interval (normal approximation) over seeds."""
    mean = statistics.fmean(values)
    half = 1.96 * statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return {"mean": round(mean, 4), "ci95": [round(mean - half, 4), round(mean + half, 4)], "n": len(values)}


# ---- candidate rules from examples (the product's is decision.fit_bias, through AIFunction.learn) ----
def fit_threshold(p: Sequence[float], truth: Sequence[bool]) -> float:
    """The P(Yes) threshold that best separates labelled examples (balanced accuracy); of equally
    good cuts, the middle one (in log-odds)."""
    scored = sorted(zip((decision.logit(x) for x in p), truth))
    positives = sum(truth)
    negatives = len(truth) - positives
    if not positives or not negatives:
        raise ValueError("examples of both answers are needed")
    # cut i: everything from scored[i] upwards is Yes
    best, cuts = -1.0, []
    yes_below = no_below = 0
    for i in range(len(scored) + 1):
        if i == 0 or scored[i - 1][0] != (scored[i][0] if i < len(scored) else None):
            value = (positives - yes_below) / positives / 2 + no_below / negatives / 2
            if value > best + 1e-12:
                best, cuts = value, [i]
            elif value > best - 1e-12:
                cuts.append(i)
        if i < len(scored):
            yes_below += scored[i][1]
            no_below += not scored[i][1]
    middle = cuts[(len(cuts) - 1) // 2] if len(cuts) % 2 else None
    if middle is None:  # an even number of best cuts: halfway between the two middle ones
        a, b = cuts[len(cuts) // 2 - 1], cuts[len(cuts) // 2]
        return _sigmoid((_cut_logit(scored, a) + _cut_logit(scored, b)) / 2)
    return _sigmoid(_cut_logit(scored, middle))


def _cut_logit(scored: list[tuple[float, bool]], i: int) -> float:
    """The log-odds of cut i: halfway between the examples either side (one unit past the ends)."""
    if i == 0:
        return scored[0][0] - 1.0
    if i == len(scored):
        return scored[-1][0] + 1.0
    return (scored[i - 1][0] + scored[i][0]) / 2


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(max(-700.0, min(700.0, -x))))


def fit_platt(p: list[float], truth: list[bool]) -> float:
    """Logistic regression of the label on logit(P(Yes)), classes weighted equally, a little L2:
    the threshold where the fitted probability is one half."""
    x = np.array([decision.logit(v) for v in p])
    y = np.array(truth, dtype=float)
    w = np.where(y == 1, 0.5 / max(y.sum(), 1), 0.5 / max((1 - y).sum(), 1))
    a, b = 1.0, 0.0
    for _ in range(50):
        z = a * x + b
        q = 1 / (1 + np.exp(-z))
        g = np.array([np.sum(w * (q - y) * x) + 1e-3 * a, np.sum(w * (q - y))])
        h11 = np.sum(w * q * (1 - q) * x * x) + 1e-3
        h12 = np.sum(w * q * (1 - q) * x)
        h22 = np.sum(w * q * (1 - q)) + 1e-9
        det = h11 * h22 - h12 * h12
        if det <= 0:
            break
        da = (h22 * g[0] - h12 * g[1]) / det
        db = (h11 * g[1] - h12 * g[0]) / det
        a, b = a - da, b - db
        if abs(da) + abs(db) < 1e-9:
            break
    if a <= 1e-9:  # the examples do not order the classes: no threshold from them
        return 0.5
    return _sigmoid(-b / a)


def fit_means(p: list[float], truth: list[bool]) -> float:
    pos = [decision.logit(v) for v, t in zip(p, truth) if t]
    neg = [decision.logit(v) for v, t in zip(p, truth) if not t]
    return _sigmoid((statistics.fmean(pos) + statistics.fmean(neg)) / 2)


def fit_medians(p: list[float], truth: list[bool]) -> float:
    pos = [decision.logit(v) for v, t in zip(p, truth) if t]
    neg = [decision.logit(v) for v, t in zip(p, truth) if not t]
    return _sigmoid((statistics.median(pos) + statistics.median(neg)) / 2)


def fit_bias_threshold(p: list[float], truth: list[bool]) -> float:
    """decision.fit_bias for a yes/no: the offsets as a threshold on P(Yes)."""
    rows = [(math.log(max(x, 1e-300)), math.log(max(1 - x, 1e-300))) for x in p]
    b_yes, b_no = decision.fit_bias(rows, [0 if t else 1 for t in truth])
    return _sigmoid(b_yes - b_no) if False else _sigmoid(-(b_yes - b_no))


CANDIDATES = {"bacc-mid": fit_threshold, "platt": fit_platt, "means": fit_means, "medians": fit_medians, "bias": fit_bias_threshold}


def guarded(fit, p: list[float], truth: list[bool], ties_keep: bool = False) -> float:
    """`fit`'s threshold, kept only if it beats argmax on the examples held out one at a time
    (`ties_keep`: or does as well)."""
    def held_out(train, i):
        tp, tt = [p[j] for j in train], [truth[j] for j in train]
        if all(tt) or not any(tt):
            return p[i] >= 0.5
        return p[i] >= fit(tp, tt)

    loo = decision.balanced_accuracy(decision.leave_one_out(len(p), held_out), truth)
    own = decision.balanced_accuracy([x >= 0.5 for x in p], truth)
    return fit(p, truth) if loo > own or (ties_keep and loo >= own) else 0.5


def auc_guarded(fit, p: list[float], truth: list[bool], floor: float) -> float:
    """`fit`'s threshold, kept only where P(Yes) orders the examples themselves with AUC >= floor."""
    return fit(p, truth) if auc(p, truth) >= floor else 0.5


# ---- one yes/no task ---------------------------------------------------------------------------
def p_yes_of(rows) -> list[float]:
    return [decision.p_yes(r) for r in rows]


def draw(truth: list, per_class: int, seed: int) -> list[int]:
    """`per_class` rows of each class, seeded."""
    rng = random.Random(seed)
    chosen = []
    for c in sorted(set(truth), key=repr):
        rows = [i for i, t in enumerate(truth) if t == c]
        chosen += rng.sample(rows, min(per_class, len(rows)))
    return sorted(chosen)


def yes_no_task(record: dict, seeds: int) -> dict:
    rows = record["logprobs"]
    truth = [bool(t) for t in record["labels"]]
    p = p_yes_of(rows)
    task = by_name("IF").task(Options())
    out: dict = {"rows": len(p), "positives": sum(truth), "auc": round(auc(p, truth), 4), "work": record["work"], "wall_s": record["wall_s"]}
    rules = {"argmax": at_threshold(p, truth, 0.5)}
    cf = [decision.p_yes(r) for r in record["content_free"] if r is not None]
    if cf:
        rules["content_free"] = at_threshold(p, truth, statistics.fmean(cf))
        for name, value in zip(("N/A", "empty", "[MASK]"), cf):
            rules[f"content_free[{name}]"] = at_threshold(p, truth, value)
    batch = statistics.fmean(p)
    rules["batch"] = at_threshold(p, truth, batch)
    if cf:
        rules["cf+batch"] = at_threshold(p, truth, (statistics.fmean(cf) + batch) / 2)
    rules["hindsight"] = hindsight(p, truth)
    out["thresholds"] = {"content_free": round(statistics.fmean(cf), 4) if cf else None, "batch": round(batch, 4)}
    out["rules"] = {k: {m: round(v, 4) for m, v in r.items()} for k, r in rules.items()}
    # examples: k per draw (k/2 per class), scored on the rows not drawn
    out["examples"] = {}
    for k in EXAMPLE_SIZES:
        if min(sum(truth), len(truth) - sum(truth)) - k // 2 < 10:
            continue
        per_method: dict[str, list[dict]] = {}
        for seed in range(seeds):
            chosen = draw(truth, k // 2, seed)
            held = set(chosen)
            ex_rows, ex_truth = [rows[i] for i in chosen], [truth[i] for i in chosen]
            rest = [i for i in range(len(p)) if i not in held]
            rp, rt = [p[i] for i in rest], [truth[i] for i in rest]
            rule, _ = by_name("IF").learn(task, ex_rows, ex_truth)  # the product's, with its held-apart check
            threshold = rule.threshold if rule is not None else 0.5
            results = {"aisql": at_threshold(rp, rt, threshold), "argmax": at_threshold(rp, rt, 0.5), "hindsight": hindsight(rp, rt)}
            ex_p = [p[i] for i in chosen]
            for name, fit in CANDIDATES.items():
                results[name] = at_threshold(rp, rt, fit(ex_p, ex_truth))
                results[f"{name}+guard"] = at_threshold(rp, rt, guarded(fit, ex_p, ex_truth))
                results[f"{name}+guard>="] = at_threshold(rp, rt, guarded(fit, ex_p, ex_truth, ties_keep=True))
                for floor in (0.6, 0.65, 0.7):
                    results[f"{name}+auc{floor}"] = at_threshold(rp, rt, auc_guarded(fit, ex_p, ex_truth, floor))
            for name, r in results.items():
                per_method.setdefault(name, []).append(r)
        out["examples"][k] = {
            name: {metric: mean_interval([r[metric] for r in values]) for metric in ("bacc", "f1", "precision", "recall", "yes_share")}
            for name, values in per_method.items()
        }
    if record.get("anchors"):
        out["anchors"] = {a: {m: round(v, 4) for m, v in binary(answers, truth).items()} for a, answers in record["anchors"].items()}
    out["signals"] = signals(p)
    out["warning"] = product_warning(rows)
    return out


def product_warning(rows) -> str | None:
    """What aisql's run summary would warn for a node answering these rows (its distinct prompts),
    through the product's own code (aisql.executor.report.signals)."""
    from aisql.executor.store.answer_store import Answer
    from aisql.executor.report.run_stats import NodeStats
    from aisql.executor.report.signals import warnings_of

    node = NodeStats(node="ai_1", function="AI.IF", strategy="prefetch")
    for r in {tuple(r) for r in rows}:
        p = decision.p_yes(r)
        node.count_signal(Answer(p >= 0.5, 0, p_yes=p, logprobs=r))
    said = warnings_of([node])
    return said[0].split(": ", 1)[1].rsplit("; give a few", 1)[0] if said else None


def signals(p: list[float]) -> dict:
    """Label-free facts of a node's answers (what a warning can read): the Yes share, the share
    near a coin toss, the spread of P(Yes) and of its log-odds."""
    logits = [decision.logit(x) for x in p]
    bins = [0] * 20
    for x in p:
        bins[min(int(x * 20), 19)] += 1
    return {
        "yes_share": round(sum(x >= 0.5 for x in p) / len(p), 4),
        "near_share": round(sum(abs(x - 0.5) <= 0.1 for x in p) / len(p), 4),
        "p_sd": round(statistics.pstdev(p), 4),
        "p_iqr": round(float(np.percentile(p, 75) - np.percentile(p, 25)), 4),
        "logit_sd": round(statistics.pstdev(logits), 4),
        "p_bins": bins,
    }


# ---- AI.CLASSIFY and AI.SCORE --------------------------------------------------------------------
def classify_task(record: dict, seeds: int) -> dict:
    classes = record["classes"]
    task = by_name("CLASSIFY").task(ClassifyOptions(tuple(classes)))
    rows, truth = record["logprobs"], record["labels"]
    probs = [decision.normalized(r) for r in rows]
    out = {"rows": len(rows), "per_class": {c: truth.count(c) for c in classes}}
    out["auc_one_vs_rest"] = {c: (round(auc([q[k] for q in probs], [t == c for t in truth]), 4) if 0 < truth.count(c) < len(truth) else None) for k, c in enumerate(classes)}

    def scores(pred, tr):
        per = [binary([x == c for x in pred], [t == c for t in tr]) for c in classes if c in tr]
        return {"accuracy": sum(x == t for x, t in zip(pred, tr)) / len(tr), "macro_f1": statistics.fmean(s["f1"] for s in per), "bacc": decision.balanced_accuracy(pred, tr)}

    own = [by_name("CLASSIFY").value_from_scores(task, r) for r in rows]
    out["argmax"] = {k: round(v, 4) for k, v in scores(own, truth).items()}
    cf = [r for r in record["content_free"] if r is not None]
    if cf:
        rule = by_name("CLASSIFY").calibrated(task, cf, "content_free")
        cal = dataclasses.replace(task, decision=rule)
        out["content_free"] = {k: round(v, 4) for k, v in scores([by_name("CLASSIFY").value_from_scores(cal, r) for r in rows], truth).items()}
    batch = dataclasses.replace(task, decision=by_name("CLASSIFY").calibrated(task, rows, "batch"))
    out["batch"] = {k: round(v, 4) for k, v in scores([by_name("CLASSIFY").value_from_scores(batch, r) for r in rows], truth).items()}
    per_seed = {"aisql": [], "argmax": []}
    per_class = 2  # the rarest class (NEUTRAL) has 4 rows
    for seed in range(seeds):
        chosen = draw(truth, per_class, seed)
        held = set(chosen)
        rule, _ = by_name("CLASSIFY").learn(task, [rows[i] for i in chosen], [truth[i] for i in chosen])
        fitted = dataclasses.replace(task, decision=rule)
        rest = [i for i in range(len(rows)) if i not in held]
        per_seed["aisql"].append(scores([by_name("CLASSIFY").value_from_scores(fitted, rows[i]) for i in rest], [truth[i] for i in rest]))
        per_seed["argmax"].append(scores([own[i] for i in rest], [truth[i] for i in rest]))
    out[f"examples_{per_class}_per_class"] = {n: {m: mean_interval([s[m] for s in v]) for m in ("accuracy", "macro_f1", "bacc")} for n, v in per_seed.items()}
    if record.get("anchors"):
        out["anchors"] = {a: {k: round(v, 4) for k, v in scores(ans, truth).items()} for a, ans in record["anchors"].items()}
    out["signals"] = {"top_label_share": round(max(own.count(c) for c in classes) / len(own), 4), "labels_used": len(set(own))}
    return out


def score_task(record: dict, seeds: int) -> dict:
    function = by_name("SCORE")
    task = function.task(ScoreOptions((1, 5)))
    pairs = [(r, t) for r, t in zip(record["logprobs"], record["labels"]) if t is not None and r is not None]
    rows, truth = [r for r, _ in pairs], [t for _, t in pairs]
    values = [function.value_from_scores(task, r) for r in rows]
    out = {"rows": len(record["logprobs"]), "labelled": len(rows), "spearman": round(spearman(values, truth), 4)}
    out["mae"] = round(statistics.fmean(abs(v - t) for v, t in zip(values, truth)), 4)
    all_values = [function.value_from_scores(task, r) for r in record["logprobs"] if r is not None]
    out["signals"] = {"value_sd": round(statistics.pstdev(all_values), 4), "value_range": [round(min(all_values), 3), round(max(all_values), 3)]}
    per_seed = {"aisql": [], "argmax": []}
    for seed in range(seeds):
        chosen = sorted(random.Random(seed).sample(range(len(rows)), 16))
        held = set(chosen)
        rule, _ = function.learn(task, [rows[i] for i in chosen], [truth[i] for i in chosen])
        fitted = dataclasses.replace(task, decision=rule)
        rest = [i for i in range(len(rows)) if i not in held]
        mapped = [function.value_from_scores(fitted, rows[i]) for i in rest]
        plain = [values[i] for i in rest]
        rt = [truth[i] for i in rest]
        per_seed["aisql"].append({"spearman": spearman(mapped, rt), "mae": statistics.fmean(abs(v - t) for v, t in zip(mapped, rt))})
        per_seed["argmax"].append({"spearman": spearman(plain, rt), "mae": statistics.fmean(abs(v - t) for v, t in zip(plain, rt))})
    out["examples_16"] = {n: {m: mean_interval([s[m] for s in v]) for m in ("spearman", "mae")} for n, v in per_seed.items()}
    return out


# ---- the acceptance checks of issue 41 ---------------------------------------------------------
def acceptance(report: dict) -> dict:
    pairs = []
    for model in GATED_MODELS:
        for task in GATED_TASKS:
            entry = report.get(model, {}).get(task)
            if entry is None or entry["auc"] < 0.75 or 16 not in entry["examples"]:
                continue
            ex = entry["examples"][16]
            pairs.append(
                {
                    "model": model,
                    "task": task,
                    "auc": entry["auc"],
                    "argmax": ex["argmax"]["bacc"]["mean"],
                    "aisql_16": ex["aisql"]["bacc"]["mean"],
                    "aisql_16_ci95": ex["aisql"]["bacc"]["ci95"],
                    "gain": round(ex["aisql"]["bacc"]["mean"] - ex["argmax"]["bacc"]["mean"], 4),
                    "hindsight": ex["hindsight"]["bacc"]["mean"],
                }
            )
    gains = [p["gain"] for p in pairs]
    return {
        "pairs": pairs,
        "mean_gain": round(statistics.fmean(gains), 4) if gains else None,
        "worst_gain": min(gains) if gains else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=40)
    args = parser.parse_args()
    report: dict = {"seeds": args.seeds}
    for model in MODELS:
        path = RESULTS / f"decision_scores_{model}.json"
        if not path.exists():
            continue
        for name, record in json.loads(path.read_text())["tasks"].items():
            if any(r is None for r in record["logprobs"]) and record["function"] != "SCORE":
                print(f"skipping {model} {name}: {sum(r is None for r in record['logprobs'])} rows without probabilities", file=sys.stderr)
                continue
            if record["function"] == "IF":
                entry = yes_no_task(record, args.seeds)
            elif record["function"] == "CLASSIFY":
                entry = classify_task(record, args.seeds)
            else:
                entry = score_task(record, args.seeds)
            entry["numerics"] = record.get("numerics")
            report.setdefault(model, {})[name] = entry
    report["acceptance"] = acceptance(report)
    (RESULTS / "decisions.json").write_text(json.dumps(report, separators=(",", ":")) + "\n")
    print_tables(report)


def print_tables(report: dict) -> None:
    """The markdown tables of RESULTS.md §27."""

    def ci(entry) -> str:
        lo, hi = entry["ci95"]
        return f"{entry['mean']:.3f} ±{(hi - lo) / 2:.3f}"

    pairs = [(m, t, e) for m in MODELS for t, e in report.get(m, {}).items() if "auc" in e]
    print("**Balanced accuracy of AI.IF by decision rule** (examples: k labelled rows, k/2 per class, scored on the rows not drawn; mean ±95% interval over the seeds)\n")
    print("| model | task | rows | AUC | argmax | content-free | batch | 8 ex. | 16 ex. | 32 ex. | hindsight | label-free warning |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for m, t, e in pairs:
        r = e["rules"]
        ex = [ci(e["examples"][k]["aisql"]["bacc"]) if k in e["examples"] else "—" for k in EXAMPLE_SIZES]
        cf = f"{r['content_free']['bacc']:.3f}" if "content_free" in r else "—"
        warn = e["warning"] or "—"
        print(f"| {m} | {t} | {e['rows']} | {e['auc']:.3f} | {r['argmax']['bacc']:.3f} | {cf} | {r['batch']['bacc']:.3f} | {' | '.join(ex)} | {r['hindsight']['bacc']:.3f} | {warn} |")
    print("\n**F1 / precision / recall of the positive class, and the Yes share** (argmax; 16 examples, mean over seeds; GGR's own GPT-4o and Llama-3-8B answers on the same rows)\n")
    print("| model | task | argmax F1 / P / R / yes | 16 ex. F1 / P / R / yes | GPT-4o bacc / F1 | Llama-3-8B bacc / F1 | tokens computed / logical | wall s |")
    print("|---|---|---|---|---|---|---:|---:|")
    for m, t, e in pairs:
        a = e["rules"]["argmax"]
        sixteen = e["examples"].get(16, {}).get("aisql")
        ex = " / ".join(f"{sixteen[k]['mean']:.2f}" for k in ("f1", "precision", "recall", "yes_share")) if sixteen else "—"
        anchors = e.get("anchors", {})
        gpt = f"{anchors['gpt4o']['bacc']:.3f} / {anchors['gpt4o']['f1']:.3f}" if "gpt4o" in anchors else "—"
        llama = f"{anchors['llama3-8b']['bacc']:.3f} / {anchors['llama3-8b']['f1']:.3f}" if "llama3-8b" in anchors else "—"
        work = e["work"]
        print(
            f"| {m} | {t} | {a['f1']:.2f} / {a['precision']:.2f} / {a['recall']:.2f} / {a['yes_share']:.2f} | {ex} | {gpt} | {llama} | "
            f"{work['computed_tokens']:,} / {work['logical_tokens']:,} | {e['wall_s']:.0f} |"
        )
    print("\n**Rules from 16 examples that were measured** (balanced accuracy gain over argmax on the rows not drawn; `aisql` = bias + guard)\n")
    methods = [k for k in next(iter(e for _, _, e in pairs if 16 in e["examples"]))["examples"][16] if k not in ("argmax",)]
    sixteen = [(m, t, e) for m, t, e in pairs if 16 in e["examples"]]
    print("| rule | " + " | ".join(f"{m} {t} ({e['auc']:.2f})" for m, t, e in sixteen) + " |")
    print("|---|" + "---:|" * len(sixteen))
    for method in methods:
        gains = [e["examples"][16][method]["bacc"]["mean"] - e["examples"][16]["argmax"]["bacc"]["mean"] for _, _, e in sixteen]
        print(f"| {method} | " + " | ".join(f"{g:+.3f}" for g in gains) + " |")
    print("\n**AI.CLASSIFY (GGR products) and AI.SCORE (SemBench Q9's rubric vs the critics' scores)**\n")
    print("| model | task | with the model's own answers | content-free | batch | with examples | signal |")
    print("|---|---|---|---|---|---|---|")
    for m in MODELS:
        for t, e in report.get(m, {}).items():
            if "auc_one_vs_rest" in e:
                ex = e["examples_2_per_class"]
                aucs = ", ".join(f"{c} {v:.2f}" for c, v in e["auc_one_vs_rest"].items() if v is not None)
                own = f"acc {e['argmax']['accuracy']:.2f}, macro-F1 {e['argmax']['macro_f1']:.2f}, bacc {e['argmax']['bacc']:.2f} (one-vs-rest AUC {aucs})"
                cf = f"acc {e['content_free']['accuracy']:.2f}, macro-F1 {e['content_free']['macro_f1']:.2f}" if "content_free" in e else "—"
                batch = f"acc {e['batch']['accuracy']:.2f}, macro-F1 {e['batch']['macro_f1']:.2f}"
                with_ex = f"2 per class: acc {ci(ex['aisql']['accuracy'])}, macro-F1 {ci(ex['aisql']['macro_f1'])}"
                print(f"| {m} | products | {own} | {cf} | {batch} | {with_ex} | top label {e['signals']['top_label_share']:.0%} |")
            elif "spearman" in e:
                ex = e["examples_16"]
                print(
                    f"| {m} | SemBench Q9 ({e['labelled']} with a critic's score) | Spearman {e['spearman']:.3f}, MAE {e['mae']:.3f} | — | — | "
                    f"16: Spearman {ci(ex['aisql']['spearman'])}, MAE {ci(ex['aisql']['mae'])} | values {e['signals']['value_range'][0]}-{e['signals']['value_range'][1]}, sd {e['signals']['value_sd']:.2f} |"
                )
    print()
    print("acceptance:", json.dumps(report["acceptance"], indent=1))


if __name__ == "__main__":
    main()
