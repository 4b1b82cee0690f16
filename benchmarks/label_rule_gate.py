"""When is issue 41's label-probability rule clearly better than the model's own answers?
(issue 58, cause 15: a rule fitted on coin-flip labels was kept and changed answers.)

    python benchmarks/label_rule_gate.py [--seeds 20] [--models ...] [--tasks ...]

Asks no model: the label log-probabilities collected by `decision_tasks.py` (as probes.py reads
them). For each task x model x number of examples, 20 seeded draws (probes.draws: examples from
rows not scored): the rule is fitted on the examples and kept

- `ungated`: where its answers held out one at a time beat the model's own on the examples
  (issue 41's check, before this change), or
- `sign<=a`: only where, besides, a one-sided sign test on the examples where the two differ
  (held-out rule right and own wrong vs the reverse) gives p <= a;
- `gain>=m/sqrt(n)`: only where its held-out gain over the model's own reaches m / sqrt(n);
- `perm-q<=a` / `perm-g<=a`: only where, besides, a permutation test gives p <= a: the examples'
  labels shuffled 39 times (seeded), the rule fitted and held out on each; `q` tests its held-out
  quality (does it read the labels at all), `g` its held-out gain over the model's own.
  `perm-q<=0.1` is what aisql does since issue 58 (aisql.functions.learning.shuffled_labels_test,
  the same seed and shuffles);

and each is scored on the other distinct prompts. The same draws with the examples' labels
shuffled (a coin flip's labels, the reported case) say how often each gate keeps a rule fitted
on noise and how many answers that rule changes. Results: results/label_rule_gate.json, the
tables on stdout (RESULTS.md §34).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import probes  # noqa: E402

import math  # noqa: E402

from aisql.functions import by_name, learning, probe  # noqa: E402

ALPHAS = (0.05, 0.2, 0.3)
PERMUTATION_ALPHAS = (0.05, 0.1)
SHUFFLES = 39  # the examples' labels shuffled this many times (p in steps of 1/40)
MARGINS = (0.25, 0.5, 1.0)  # the held-out gain over the model's own answers must reach m / sqrt(examples)
SIZES = {"IF": (8, 16, 32, 64), "CLASSIFY": (2, 4, 8), "SCORE": (16, 32, 64)}
METRIC = {"IF": "bacc", "CLASSIFY": "macro_f1", "SCORE": "spearman"}


def wins(function, rule: list, own: list, labels: list) -> tuple[int, int]:
    """(examples where the rule's held-out answer is better than the model's own, examples where
    it is worse): right against wrong for a label, the smaller error for a score."""
    better = worse = 0
    for r, o, label in zip(rule, own, labels):
        if function.probe_kind == probe.NUMBER:
            better, worse = better + (abs(r - label) < abs(o - label)), worse + (abs(o - label) < abs(r - label))
        else:
            better, worse = better + (r == label and o != label), worse + (o == label and r != label)
    return better, worse


def sign_test(better: int, worse: int) -> float:
    """One-sided sign test: the chance of `better` or more wins among the examples where the two
    differ, were each a coin flip (1.0 where they never differ)."""
    n = better + worse
    if n == 0:
        return 1.0
    return math.fsum(math.comb(n, k) for k in range(better, n + 1)) / 2**n


def permutation_p(function, plain, rows_ex: list, labels_ex: list, own: list) -> tuple[float, float]:
    """Two permutation tests of the rule against labels that say nothing of the rows: the
    examples' labels shuffled SHUFFLES times (seeded), the rule fitted and held out one at a time
    on each. p of its held-out quality (`perm-q`: the rule reads the labels at all) and of its
    held-out gain over the model's own answers (`perm-g`: it reads them better than the model
    does): (1 + shuffles as good) / (1 + SHUFFLES). Stops once both exceed the largest alpha (a
    p above it is reported as 1)."""
    def loo_of(labels: list) -> list:
        return learning.held_out_answers(function, plain, rows_ex, labels, own)

    observed = loo_of(labels_ex)
    q0 = function.example_quality(observed, labels_ex)
    g0 = q0 - function.example_quality(own, labels_ex)
    limit = max(PERMUTATION_ALPHAS) * (1 + SHUFFLES) - 1
    rng = np.random.default_rng(9000)
    as_good_q = as_good_g = 0
    for _ in range(SHUFFLES):
        shuffled = [labels_ex[i] for i in rng.permutation(len(labels_ex))]
        q = function.example_quality(loo_of(shuffled), shuffled)
        as_good_q += q >= q0
        as_good_g += q - function.example_quality(own, shuffled) >= g0
        if as_good_q > limit and as_good_g > limit:
            return 1.0, 1.0
    p = lambda k: (1 + k) / (1 + SHUFFLES) if k <= limit else 1.0  # noqa: E731
    return p(as_good_q), p(as_good_g)


def one_draw(data, function, examples: list[int], scored: list[int], labels_ex: list, classes) -> dict:
    plain = dataclasses.replace(data.task, decision=None)
    rows_ex = [data.logprobs[i] for i in examples]
    own = [function.value_from_scores(plain, r) for r in rows_ex]
    loo = learning.held_out_answers(function, plain, rows_ex, labels_ex, own)
    perm_quality, perm_gain = permutation_p(function, plain, rows_ex, labels_ex, own)
    gain = function.example_quality(loo, labels_ex) - function.example_quality(own, labels_ex)
    better = gain > 0
    p = sign_test(*wins(function, loo, own, labels_ex))
    try:
        fitted = function.fit_decision(plain, rows_ex, labels_ex)
    except ValueError:
        fitted = None
    truth = [data.labels[i] for i in scored]
    argmax = [function.value_from_scores(plain, data.logprobs[i]) for i in scored]
    ruled = argmax if fitted is None else [function.value_from_scores(dataclasses.replace(plain, decision=fitted), data.logprobs[i]) for i in scored]
    keeps = {
        "ungated": better,
        **{f"sign<={a}": better and p <= a for a in ALPHAS},
        **{f"gain>={m}/sqrt(n)": gain >= m / np.sqrt(len(labels_ex)) and better for m in MARGINS},
        **{f"perm-q<={a}": better and perm_quality <= a for a in PERMUTATION_ALPHAS},
        **{f"perm-g<={a}": better and perm_gain <= a for a in PERMUTATION_ALPHAS},
    }
    out = {}
    for name, kept in keeps.items():
        answers = ruled if kept else argmax
        out[name] = {
            "quality": probes.metrics(data.function, answers, truth, classes)[METRIC[data.function]],
            "kept": float(kept),
            "changed": float(np.mean([a != b for a, b in zip(answers, argmax)])),
        }
    out["argmax"] = {"quality": probes.metrics(data.function, argmax, truth, classes)[METRIC[data.function]], "kept": 0.0, "changed": 0.0}
    return out


def measure(data, seeds: int) -> dict:
    function = by_name(data.function)
    classes = list(data.task.labels) if data.function == "CLASSIFY" else None
    result = {}
    for size in SIZES[data.function]:
        real, noise = [], []
        for seed in range(seeds):
            drawn = probes.draws(data, size, seed)
            if drawn is None:
                break
            examples, scored = drawn
            labels_ex = [data.labels[i] for i in examples]
            real.append(one_draw(data, function, examples, scored, labels_ex, classes))
            shuffled = list(np.random.default_rng(5000 + seed).permutation(np.array(labels_ex, dtype=object)))
            noise.append(one_draw(data, function, examples, scored, shuffled, classes))
        if len(real) < seeds:
            continue
        result[str(size)] = {
            "real": {name: {k: probes.summary([d[name][k] for d in real]) for k in ("quality", "kept", "changed")} for name in real[0]},
            "shuffled": {name: {k: probes.summary([d[name][k] for d in noise]) for k in ("quality", "kept", "changed")} for name in noise[0]},
        }
    return result


def tables(report: dict) -> str:
    gates = ["ungated"] + [f"sign<={a}" for a in ALPHAS] + [f"gain>={m}/sqrt(n)" for m in MARGINS]
    gates += [f"perm-{s}<={a}" for s in "qg" for a in PERMUTATION_ALPHAS]
    lines = []
    for function in ("IF", "CLASSIFY", "SCORE"):
        rows = [(m, t, rec) for m, tasks in report.items() for t, rec in tasks.items() if rec["function"] == function]
        if not rows:
            continue
        lines += ["", f"**{function}: {METRIC[function]} on the scored prompts (kept: share of draws the rule is kept; noise: the same draws, labels shuffled)**", ""]
        lines.append("| model | task | k | argmax | " + " | ".join(gates) + " | kept " + " / ".join(gates) + " | kept on noise " + " / ".join(gates) + " |")
        lines.append("|---|---|---:|---:|" + "---:|" * len(gates) + "---|---|")
        for model, task, rec in rows:
            for size, cell in rec["sizes"].items():
                real, noise = cell["real"], cell["shuffled"]
                lines.append(
                    f"| {model} | {task} | {size} | {real['argmax']['quality']['mean']:.3f} | "
                    + " | ".join(f"{real[g]['quality']['mean']:.3f}" for g in gates)
                    + " | " + " / ".join(f"{real[g]['kept']['mean']:.0%}" for g in gates)
                    + " | " + " / ".join(f"{noise[g]['kept']['mean']:.0%}" for g in gates) + " |"
                )
    # the summary a choice is made from: mean gain over argmax, worst pair, kept on noise
    lines += ["", "| gate | mean gain over argmax (real labels) | worst pair | kept on shuffled labels | answers changed on shuffled labels | quality lost to shuffled labels (mean / worst) |", "|---|---:|---:|---:|---:|---:|"]
    for g in gates:
        gains, kept, changed, lost = [], [], [], []
        for tasks in report.values():
            for rec in tasks.values():
                for cell in rec["sizes"].values():
                    gains.append(cell["real"][g]["quality"]["mean"] - cell["real"]["argmax"]["quality"]["mean"])
                    kept.append(cell["shuffled"][g]["kept"]["mean"])
                    changed.append(cell["shuffled"][g]["changed"]["mean"])
                    lost.append(cell["shuffled"][g]["quality"]["mean"] - cell["shuffled"]["argmax"]["quality"]["mean"])
        lines.append(f"| {g} | {np.mean(gains):+.4f} | {np.min(gains):+.4f} | {np.mean(kept):.1%} | {np.mean(changed):.1%} | {np.mean(lost):+.4f} / {np.min(lost):+.4f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--models", default=",".join(probes.MODELS))
    parser.add_argument("--tasks", default=",".join(probes.IF_TASKS + probes.CLASSIFY_TASKS + probes.SCORE_TASKS))
    parser.add_argument("--out", default=str(probes.RESULTS / "label_rule_gate.json"))
    parser.add_argument("--tables", action="store_true", help="print the tables of --out; measure nothing")
    args = parser.parse_args()
    path = Path(args.out)
    if args.tables:
        print(tables(json.loads(path.read_text())))
        return
    report: dict = {}
    for model in args.models.split(","):
        for name in args.tasks.split(","):
            data = probes.load(model, name)
            if data is None:
                continue
            report.setdefault(model, {})[name] = {"function": data.function, "sizes": measure(data, args.seeds)}
            print(f"{model} {name} done", flush=True)
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(tables(report))


if __name__ == "__main__":
    main()
