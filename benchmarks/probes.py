"""Labelled rows teach the engine (issue 57): probes on the model's hidden states against the rules
on its label probabilities, on every labelled task and model.

    python benchmarks/decision_tasks.py --model M --rows 300     # once per model: probabilities and states, through aisql
    python benchmarks/probes.py [--seeds 20] [--models ...] [--tasks ...]

`decision_tasks.py` runs each task's call through aisql as a user runs it with labelled
examples (so every prompt's hidden state is kept in the result cache) and writes the rows' label
log-probabilities and states. This script asks no LLM: for each task x model x number of
examples it draws labelled rows (seeded; AI.IF: half per class, AI.CLASSIFY: a number per class,
AI.SCORE: at random), fits every rule on them and scores it on the other distinct prompts (a text
asked by several rows counts once, and is never both an example and scored). Rules:
- `argmax`: the model's own answers (the likeliest label; AI.SCORE: the expectation);
- `issue41`: the rule on the label probabilities, kept only when it beats argmax held out
  (aisql's rule before issue 57, and without issue 58's permutation test: `ungated_rule`);
- `gated`: the same rule under issue 58's permutation test (`AIFunction.learn` without states);
- `probe`: aisql's probe alone (aisql.functions.probe.fit: standardised final-layer state,
  logistic or ridge regression at a fixed strength); `probe_raw` (no standardisation, C = 1) and
  `probe_cv` (the strength chosen by 4-fold cross-validation on the examples) are the variants
  it was chosen from;
- `aisql`: what aisql answers now (`AIFunction.learn` with the states: the probe only where it
  beats the better of the first two by the margin on the examples), and `margin=m` the same
  choice at other margins (the margin was chosen from these);
- `embedding`: the same probe on all-MiniLM-L6-v2's embedding of the prompt text (the `[embed]`
  extra), and `tfidf`: logistic regression on TF-IDF of the prompt text — the baselines the
  LLM's states must beat;
- GGR's GPT-4o and Llama-3-8B answers on the same scored rows (`anchor:*`).
`--core` measures only argmax, issue41, gated and aisql (the choice's fallback changed by issue
58); `--shuffled` runs the same draws with the examples' labels shuffled (a coin flip's labels:
how often a rule other than the model's own answers, and what it costs).
Each figure is a mean over the draws with its 95% interval (t). Results: results/probes.json;
the tables go to stdout (RESULTS.md §34).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from aisql.functions import by_name, decision, learning, probe

RESULTS = HERE / "results"
MODELS = ("smollm2", "qwen-0.5b", "qwen-1.5b")
IF_TASKS = ("beer", "pdmx", "sembench", "movies", "posts")
CLASSIFY_TASKS = ("sembench_rating", "sembench_genre", "sembench_film", "movies_genre", "products")
SCORE_TASKS = ("sembench_score", "products_rating")
SIZES = (8, 16, 32, 64)  # AI.IF and AI.SCORE: examples in all
PER_CLASS = (2, 4, 8)  # AI.CLASSIFY: examples per class
# A size is measured only where every class keeps this many scored prompts: AI.IF 10; AI.CLASSIFY
# 2, so GGR products (4 NEUTRAL rows) is measured at 2 per class and the small GGR genre task at 4.
MIN_SCORED_PER_CLASS = {"IF": 10, "CLASSIFY": 2}
MARGINS = (0.0, 0.1, 0.2, 0.3, 0.5, 0.8)
ANCHORS = ("gpt4o", "llama3-8b")


# ---- data ----------------------------------------------------------------------------------------
@dataclasses.dataclass
class TaskData:
    name: str
    function: str
    task: object  # the aisql Task of the call
    labels: list  # per distinct prompt
    logprobs: list
    states: np.ndarray
    texts: list[str]
    anchors: dict[str, list]


def load(model: str, name: str) -> TaskData | None:
    """A task's distinct prompts (a text asked by several rows once, its first row's label and
    anchors), with their label log-probabilities and hidden states."""
    import decision_tasks

    records = json.loads((RESULTS / f"decision_scores_{model}.json").read_text())["tasks"]
    path = decision_tasks.states_file(model, name)
    if name not in records or not path.exists():
        return None
    record = records[name]
    built = decision_tasks.tasks(record["rows"] if name in ("sembench", "sembench_rating") else None)[name]()  # the seeded sample it was collected on
    if [str(row["id"]) for row in built.table.to_pylist()] != [str(i) for i in record["ids"]]:  # as collect() read them
        raise SystemExit(f"{model} {name}: the task's rows changed since it was collected: run decision_tasks.py again")
    from aisql.sql.template import parse_template

    template = parse_template(built.template)
    columns = decision_tasks.placeholder_columns(built.template)
    texts = [template.render([str(row[c]) for c in columns]) for row in built.table.to_pylist()]
    states = np.load(path).astype(np.float32)
    first: dict[str, int] = {}
    for i, (text, label) in enumerate(zip(texts, record["labels"])):
        if label is not None and record["logprobs"][i] is not None:
            first.setdefault(text, i)
    keep = sorted(first.values())
    return TaskData(
        name,
        record["function"],
        decision_tasks.function_task(built),
        [record["labels"][i] for i in keep],
        [record["logprobs"][i] for i in keep],
        states[keep],
        [texts[i] for i in keep],
        {a: [record["anchors"][a][i] for i in keep] for a in ANCHORS if a in (record.get("anchors") or {})},
    )


def draws(data: TaskData, size: int, seed: int) -> tuple[list[int], list[int]] | None:
    """(examples, scored) indexes of one seeded draw; None where a class would keep too few."""
    rng = np.random.default_rng(1000 + seed)
    n = len(data.labels)
    if data.function == "SCORE":
        if n - size < 30:
            return None
        chosen = sorted(rng.choice(n, size, replace=False).tolist())
        while len({data.labels[i] for i in chosen}) < 2:  # a scale needs two values (skewed GGR stars: 78% are 5)
            chosen = sorted(rng.choice(n, size, replace=False).tolist())
    else:
        per_class = size // 2 if data.function == "IF" else size
        chosen = []
        for value in sorted(set(map(str, data.labels))):
            members = [i for i, label in enumerate(data.labels) if str(label) == value]
            if len(members) - per_class < MIN_SCORED_PER_CLASS[data.function]:
                return None
            chosen += rng.choice(members, per_class, replace=False).tolist()
        chosen.sort()
    scored = sorted(set(range(n)) - set(chosen))
    return chosen, scored


# ---- metrics ---------------------------------------------------------------------------------
def metrics(function: str, predicted: list, truth: list, classes: list | None = None) -> dict:
    if function == "SCORE":
        return {"spearman": spearman(predicted, truth), "mae": float(np.mean(np.abs(np.asarray(predicted) - np.asarray(truth))))}
    out = {"bacc": decision.balanced_accuracy(predicted, truth)}
    if function == "IF":
        tp = sum(p and t for p, t in zip(predicted, truth))
        fp = sum(p and not t for p, t in zip(predicted, truth))
        fn = sum(t and not p for p, t in zip(predicted, truth))
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        out.update(f1=2 * precision * recall / (precision + recall) if precision + recall else 0.0, precision=precision, recall=recall)
    else:
        out["macro_f1"] = macro_f1(predicted, truth, classes)
        out["accuracy"] = float(np.mean([p == t for p, t in zip(predicted, truth)]))
    return out


def macro_f1(predicted: list, truth: list, classes: list) -> float:
    """Mean F1 over the classes present in the scored labels."""
    scores = []
    for c in sorted(set(truth)):
        tp = sum(p == c and t == c for p, t in zip(predicted, truth))
        fp = sum(p == c and t != c for p, t in zip(predicted, truth))
        fn = sum(p != c and t == c for p, t in zip(predicted, truth))
        scores.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return float(np.mean(scores))


def spearman(x: list, y: list) -> float:
    from scipy.stats import spearmanr

    value = spearmanr(x, y).statistic
    return 0.0 if value is None or math.isnan(value) else float(value)


def auc(scores: list[float], truth: list[bool]) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(truth, scores))


def summary(values: list[float]) -> dict:
    """Mean and 95% interval (t) over the draws."""
    from scipy.stats import t

    a = np.asarray(values, dtype=float)
    if len(a) < 2:
        return {"mean": round(float(a.mean()), 4), "ci": None, "n": len(a)}
    half = t.ppf(0.975, len(a) - 1) * a.std(ddof=1) / math.sqrt(len(a))
    return {"mean": round(float(a.mean()), 4), "ci": round(float(half), 4), "n": len(a)}


# ---- baselines on the prompt text -----------------------------------------------------------------
_EMBEDDINGS: dict[str, np.ndarray] = {}


def embeddings(texts: list[str]) -> np.ndarray:
    """all-MiniLM-L6-v2 vectors of the prompt texts (the `[embed]` extra's model), cached by content."""
    key = hashlib.sha256("\x1f".join(texts).encode()).hexdigest()
    if key not in _EMBEDDINGS:
        from sentence_transformers import SentenceTransformer

        from aisql.engine.backends.embedding import resolve_embed_model

        model = SentenceTransformer(str(resolve_embed_model().directory), device="cpu")
        _EMBEDDINGS[key] = model.encode(texts, batch_size=64, normalize_embeddings=True)
    return _EMBEDDINGS[key]


def tfidf_predict(texts_ex: list[str], targets: list, texts_te: list[str], kind: str) -> list:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression, Ridge

    vectorizer = TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2), min_df=1)
    x = vectorizer.fit_transform(texts_ex)
    if kind == probe.NUMBER:
        return Ridge(alpha=1.0).fit(x, targets).predict(vectorizer.transform(texts_te)).tolist()
    return LogisticRegression(C=10.0, class_weight="balanced", max_iter=1000).fit(x, targets).predict(vectorizer.transform(texts_te)).tolist()


def probe_variant(x_ex: np.ndarray, targets: list, x_te: np.ndarray, kind: str, variant: str) -> list:
    """The variants aisql's probe was chosen from: no standardisation at C = 1, or the strength
    chosen by 4-fold cross-validation (balanced accuracy) from a grid."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    if kind == probe.NUMBER:
        return probe.fit(x_ex, targets, kind).predict(x_te)
    if variant == "probe_raw":
        return LogisticRegression(C=1.0, class_weight="balanced", max_iter=500).fit(x_ex, targets).predict(x_te).tolist()
    mean, spread = x_ex.mean(0), np.maximum(x_ex.std(0), probe.MIN_SPREAD)
    z_ex, z_te = (x_ex - mean) / spread, (x_te - mean) / spread
    y = np.asarray(targets)
    folds = min(4, int(np.bincount(np.unique(y, return_inverse=True)[1]).min()))
    best, best_c = -1.0, 0.1
    for c in (0.001, 0.01, 0.1, 1.0, 10.0):
        scores = []
        for train, test in StratifiedKFold(folds, shuffle=True, random_state=0).split(z_ex, y):
            model = LogisticRegression(C=c, class_weight="balanced", max_iter=500).fit(z_ex[train], y[train])
            scores.append(decision.balanced_accuracy(model.predict(z_ex[test]).tolist(), y[test].tolist()))
        if np.mean(scores) > best:
            best, best_c = float(np.mean(scores)), c
    return LogisticRegression(C=best_c, class_weight="balanced", max_iter=500).fit(z_ex, y).predict(z_te).tolist()


# ---- one draw -------------------------------------------------------------------------------------
def ungated_rule(function, plain, rows_ex: list, labels_ex: list):
    """Issue 41's rule as it was: fitted on the examples, kept where its answers held out one at
    a time beat the model's own on them — no test against shuffled labels (issue 58, cause 15)."""
    own = [function.value_from_scores(plain, r) for r in rows_ex]
    loo = learning.held_out_answers(function, plain, rows_ex, labels_ex, own)
    if function.example_quality(loo, labels_ex) > function.example_quality(own, labels_ex):
        return function.fit_decision(plain, rows_ex, labels_ex)
    return None


def run_draw(data: TaskData, examples: list[int], scored: list[int], classes: list | None, core: bool = False, shuffle_seed: int | None = None) -> dict:
    function = by_name(data.function)
    plain = dataclasses.replace(data.task, decision=None)
    kind = function.probe_kind
    rows_ex = [data.logprobs[i] for i in examples]
    labels_ex = [data.labels[i] for i in examples]
    if shuffle_seed is not None:  # a coin flip's labels: the same draw's, shuffled among its examples
        labels_ex = [labels_ex[i] for i in np.random.default_rng(5000 + shuffle_seed).permutation(len(labels_ex))]
    truth = [data.labels[i] for i in scored]
    states_ex = [data.states[i].astype(np.float16).tobytes() for i in examples]

    def decided(rule) -> list:
        task = dataclasses.replace(plain, decision=rule)
        if rule is not None and rule.probe is not None:
            return [function.value_from_probe(task, p) for p in rule.probe.predict(data.states[scored])]
        return [function.value_from_scores(task, data.logprobs[i]) for i in scored]

    rule41 = ungated_rule(function, plain, rows_ex, labels_ex)
    gated, _ = function.learn(plain, rows_ex, labels_ex)
    started = time.perf_counter()
    chosen, report = function.learn(plain, rows_ex, labels_ex, states_ex)
    learn_s = time.perf_counter() - started
    predictions = {"argmax": decided(None), "issue41": decided(rule41), "gated": decided(gated), "aisql": decided(chosen)}
    if core:
        out = {name: metrics(data.function, values, truth, classes) for name, values in predictions.items()}
        out["_chosen"], out["_learn_s"] = report["chosen"], learn_s
        out["_changed"] = float(np.mean([a != b for a, b in zip(predictions["aisql"], predictions["argmax"])]))
        return out
    targets = [function.probe_target(plain, label) for label in labels_ex]
    fitted = probe.fit(data.states[examples], targets, kind)
    predictions["probe"] = [function.value_from_probe(plain, p) for p in fitted.predict(data.states[scored])]
    for variant in ("probe_raw", "probe_cv"):
        if kind == probe.CLASSES:
            values = probe_variant(data.states[examples], targets, data.states[scored], kind, variant)
            predictions[variant] = [function.value_from_probe(plain, int(p)) for p in values]
    vectors = embeddings(data.texts)
    embedded = probe.fit(vectors[examples], targets, kind)
    predictions["embedding"] = [function.value_from_probe(plain, p) for p in embedded.predict(vectors[scored])]
    predictions["tfidf"] = [
        function.value_from_probe(plain, p) for p in tfidf_predict([data.texts[i] for i in examples], targets, [data.texts[i] for i in scored], kind)
    ]
    # the choice at other margins, from the same evidence (aisql.functions.learning: the probe's gain over the label-probability rule)
    evidence = report.get("probe_evidence")
    if evidence is not None:
        for m in MARGINS:
            take = evidence["gain"] >= m / math.sqrt(len(examples))
            predictions[f"margin={m}"] = predictions["probe"] if take else predictions["gated"]
    for anchor, answers in data.anchors.items():
        predictions[f"anchor:{anchor}"] = [answers[i] for i in scored]  # bool (IF) or the label, as collected
    out = {name: metrics(data.function, values, truth, classes) for name, values in predictions.items()}
    out["_chosen"] = report["chosen"]
    out["_learn_s"] = learn_s
    return out


def measure(data: TaskData, sizes, seeds: int, core: bool = False, shuffled: bool = False) -> dict:
    classes = list(data.task.labels) if data.function == "CLASSIFY" else None
    function = by_name(data.function)
    info = {"prompts": len(data.labels), "width": int(data.states.shape[1])}
    if data.function == "IF":
        info["auc"] = round(auc([function.p_yes(lp) for lp in data.logprobs], data.labels), 4)
        info["positives"] = int(sum(data.labels))
    out = {"info": info, "sizes": {}}
    for size in sizes:
        per_draw = []
        for seed in range(seeds):
            split = draws(data, size, seed)
            if split is None:
                break
            per_draw.append(run_draw(data, *split, classes, core, seed if shuffled else None))
        if not per_draw:
            continue
        rules = [k for k in per_draw[0] if not k.startswith("_")]
        figures = {rule: {metric: summary([d[rule][metric] for d in per_draw]) for metric in per_draw[0][rule]} for rule in rules}
        chosen = [d["_chosen"] for d in per_draw]
        figures["_probe_chosen"] = round(sum(c == learning.PROBE for c in chosen) / len(chosen), 3)
        figures["_learn_s"] = round(float(np.mean([d["_learn_s"] for d in per_draw])), 3)
        if core:
            figures["_not_own"] = round(sum(c != learning.OWN for c in chosen) / len(chosen), 3)
            figures["_changed"] = round(float(np.mean([d["_changed"] for d in per_draw])), 4)
        out["sizes"][str(size)] = figures
        print(f"  {data.name} {size}: " + "  ".join(f"{r} {figures[r][main_metric(data.function)]['mean']:.3f}" for r in rules), flush=True)
    return out


def main_metric(function: str) -> str:
    return {"IF": "bacc", "CLASSIFY": "macro_f1", "SCORE": "spearman"}[function]


# ---- tables and the acceptance figures --------------------------------------------------------------
def _cell(figures: dict, rule: str, metric: str) -> str:
    entry = figures.get(rule, {}).get(metric)
    if entry is None:
        return "—"
    return f"{entry['mean']:.3f}" + (f" ±{entry['ci']:.3f}" if entry.get("ci") is not None else "")


def tables(report: dict) -> str:
    """RESULTS.md's tables from results/probes.json, and the acceptance figures (issue 57)."""
    lines = []
    results = report["results"]
    kinds = (
        ("IF", "bacc", "balanced accuracy", ("argmax", "issue41", "gated", "aisql", "probe", "probe_cv", "embedding", "tfidf", "anchor:gpt4o", "anchor:llama3-8b")),
        ("CLASSIFY", "macro_f1", "macro-F1", ("argmax", "issue41", "gated", "aisql", "probe", "probe_cv", "embedding", "tfidf", "anchor:gpt4o", "anchor:llama3-8b")),
        ("SCORE", "spearman", "Spearman", ("argmax", "issue41", "gated", "aisql", "probe", "embedding", "tfidf")),
    )
    for function, metric, name, rules in kinds:
        lines.append(f"\n**{function}: {name}** (mean ±95% interval over the draws; examples per class for AI.CLASSIFY, in all otherwise)\n")
        lines.append("| model | task | prompts | k | " + " | ".join(rules) + " | probe chosen |")
        lines.append("|---|---|---:|---:|" + "---:|" * len(rules) + "---:|")
        for model, tasks in results.items():
            for task, record in tasks.items():
                if record["function"] != function:
                    continue
                for size, figures in record["sizes"].items():
                    cells = " | ".join(_cell(figures, r, metric) for r in rules)
                    lines.append(f"| {model} | {task} | {record['info']['prompts']} | {size} | {cells} | {figures['_probe_chosen']:.0%} |")
    # acceptance 1: AI.IF pairs at 16 (no pair more than 0.02 below issue 41) and 32 (mean >= +0.08)
    verdicts = []
    for size, test in (("16", "worst"), ("32", "mean")):
        gains = {
            (model, task): record["sizes"][size]["aisql"]["bacc"]["mean"] - record["sizes"][size]["issue41"]["bacc"]["mean"]
            for model, tasks in results.items() for task, record in tasks.items() if record["function"] == "IF" and size in record["sizes"]
        }
        if not gains:
            continue
        if test == "worst":
            worst = min(gains, key=gains.get)
            verdicts.append(f"AI.IF at 16 examples: the chosen rule against issue 41's, worst pair {worst[0]} {worst[1]} {gains[worst]:+.3f} (acceptance: >= -0.02) over {len(gains)} pairs")
        else:
            verdicts.append(f"AI.IF at 32 examples: mean gain over issue 41's {np.mean(list(gains.values())):+.3f} over {len(gains)} pairs (acceptance: >= +0.08): " + ", ".join(f"{m} {t} {g:+.3f}" for (m, t), g in gains.items()))
    for model, tasks in results.items():
        for task, record in tasks.items():
            if record["function"] == "CLASSIFY" and "4" in record["sizes"]:
                today, ours = record["sizes"]["4"]["issue41"]["macro_f1"]["mean"], record["sizes"]["4"]["aisql"]["macro_f1"]["mean"]
                need = f"; needs >= {3 * today:.3f} (3x)" if today < 0.3 else ""
                verdicts.append(f"AI.CLASSIFY 4 per class, {model} {task}: macro-F1 {today:.3f} -> {ours:.3f} ({ours / today if today else float('inf'):.1f}x){need}")
    return "\n".join(lines + ["", *verdicts])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", action="store_true", help="print the tables of --out and the acceptance figures; measure nothing")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--tasks", default=",".join(IF_TASKS + CLASSIFY_TASKS + SCORE_TASKS))
    parser.add_argument("--out", default=str(RESULTS / "probes.json"))
    parser.add_argument("--sizes", default=None, help="only these sizes (examples, or per class for AI.CLASSIFY), comma-separated")
    parser.add_argument("--core", action="store_true", help="only argmax, issue41, gated and aisql")
    parser.add_argument("--shuffled", action="store_true", help="the examples' labels shuffled (a coin flip's)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    path = Path(args.out)
    if args.tables:
        print(tables(json.loads(path.read_text())))
        return
    report = json.loads(path.read_text()) if path.exists() else {"results": {}}
    report["seeds"] = args.seeds
    report["margin"] = learning.MARGIN
    for model in args.models.split(","):
        for name in args.tasks.split(","):
            data = load(model, name)
            if data is None:
                print(f"{model} {name}: not collected", flush=True)
                continue
            print(f"{model} {name} ({len(data.labels)} distinct prompts)", flush=True)
            sizes = PER_CLASS if data.function == "CLASSIFY" else SIZES
            if args.sizes:
                sizes = [s for s in sizes if str(s) in args.sizes.split(",")]
            report["results"].setdefault(model, {})[name] = {"function": data.function, **measure(data, sizes, args.seeds, args.core, args.shuffled)}
            path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"written {path}")


if __name__ == "__main__":
    main()
