"""How well each label-free quality signal tells a model that answers a task from one that does not
(issue 60): the product's own signals (aisql.executor.report.signals, fed through NodeStats as a
run feeds them) on every labelled task x model pair whose per-row label probabilities
`decision_tasks.py` kept, against each pair's measured quality.

    python benchmarks/signal_quality.py      # asks no model: reads results/decision_scores_<model>.json

Quality and the useful level, per function (a signal that fires on a useful pair is noise):
- AI.IF: the AUC of P(Yes) against the labels; useful at >= 0.65.
- AI.CLASSIFY: the likeliest label's balanced accuracy, as a lift over chance (1 / labels); useful
  at a lift >= 0.15.
- AI.SCORE: Spearman of the scores with the labels; useful at >= 0.3.
Results: results/signal_quality.json and a table on stdout (RESULTS.md §36).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aisql.executor.report.run_stats import NodeStats  # noqa: E402
from aisql.executor.report.signals import quality_lines  # noqa: E402
from aisql.executor.store.answer_store import Answer  # noqa: E402
from aisql.functions import by_name  # noqa: E402
from aisql.functions import decision  # noqa: E402
from aisql.functions.ai_classify import ClassifyOptions  # noqa: E402
from aisql.functions.ai_score import ScoreOptions  # noqa: E402
from aisql.functions.base import Options  # noqa: E402
from decisions import auc, spearman  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
MODELS = ("smollm2", "qwen-0.5b", "qwen-1.5b")
USEFUL = {"IF": 0.65, "CLASSIFY": 0.15, "SCORE": 0.3}
# Each warning's reason, by the words the product says it with.
SIGNALS = {
    "IF": {"one side (>= 95%)": "answers are", "near a coin toss (>= 45%)": "barely prefers", "flat log-odds (sd < 0.25)": "hardly varies"},
    "CLASSIFY": {"one label (>= 85%)": "% of", "even distributions (entropy >= 0.9)": "nearly even"},
    "SCORE": {"bunched (sd < 6% of the scale)": "bunched"},
}


def node_of(record: dict) -> tuple[NodeStats, float | None]:
    """The node a run of this task would report, and the task's quality."""
    function = record["function"]
    rows, truth = record["logprobs"], record["labels"]
    if function == "IF":
        f = by_name("IF")
        task = f.task(Options())
        node = NodeStats(node=record["task"], function="AI.IF(...)", strategy="prefetch")
        p = [f.p_yes(r) for r in rows]
        for r, py in zip(rows, p):
            node.count_signal(Answer(f.value_from_scores(task, r), 0, p_yes=py, logprobs=tuple(r)))
        return node, auc(p, [bool(t) for t in truth])
    if function == "CLASSIFY":
        f, classes = by_name("CLASSIFY"), record["classes"]
        task = f.task(ClassifyOptions(tuple(classes)))
        node = NodeStats(node=record["task"], function="AI.CLASSIFY(...)", strategy="prefetch", labels=list(classes))
        own = [f.value_from_scores(task, r) for r in rows]
        for r, value in zip(rows, own):
            node.count_signal(Answer(value, 0, logprobs=tuple(r)))
            node.count_values((value,))
        return node, decision.balanced_accuracy(own, truth) - 1 / len(classes)
    f = by_name("SCORE")
    task = f.task(ScoreOptions((1, 5)))
    node = NodeStats(node=record["task"], function="AI.SCORE(...)", strategy="prefetch", labels=[str(v) for v in range(1, 6)])
    values = [f.value_from_scores(task, r) for r in rows if r is not None]
    for r, value in zip([r for r in rows if r is not None], values):
        node.count_signal(Answer(value, 0, logprobs=tuple(r)))
        node.count_values((value,))
    pairs = [(f.value_from_scores(task, r), t) for r, t in zip(rows, truth) if r is not None and t is not None]
    return node, spearman([v for v, _ in pairs], [t for _, t in pairs])


def main() -> None:
    pairs = []
    for model in MODELS:
        path = RESULTS / f"decision_scores_{model}.json"
        if not path.exists():
            continue
        for name, record in json.loads(path.read_text())["tasks"].items():
            node, quality = node_of(record)
            if quality is None or (isinstance(quality, float) and math.isnan(quality)):
                continue
            warnings = [line.text for line in quality_lines([node]) if line.warning]
            fired = [signal for signal, words in SIGNALS[record["function"]].items() if any(words in w for w in warnings)]
            pairs.append({"model": model, "task": name, "function": record["function"], "quality": round(quality, 4),
                          "useful": quality >= USEFUL[record["function"]], "fired": fired, "warnings": warnings})
    table = []
    for function, signals in SIGNALS.items():
        mine = [p for p in pairs if p["function"] == function]
        poor, useful = [p for p in mine if not p["useful"]], [p for p in mine if p["useful"]]
        for signal in list(signals) + ["any warning"]:
            fires = (lambda p: bool(p["fired"])) if signal == "any warning" else (lambda p, s=signal: s in p["fired"])
            table.append({"function": function, "signal": signal, "poor_fired": sum(map(fires, poor)), "poor": len(poor),
                          "useful_fired": sum(map(fires, useful)), "useful": len(useful)})
    out = {"useful_level": USEFUL, "pairs": pairs, "table": table}
    (RESULTS / "signal_quality.json").write_text(json.dumps(out, indent=1) + "\n")
    print("| function | signal | fires on poor pairs | fires on useful pairs | precision |")
    print("|---|---|---|---|---|")
    for row in table:
        fired = row["poor_fired"] + row["useful_fired"]
        precision = f"{row['poor_fired'] / fired:.2f}" if fired else "n/a"
        print(f"| {row['function']} | {row['signal']} | {row['poor_fired']} of {row['poor']} | {row['useful_fired']} of {row['useful']} | {precision} |")
    print()
    for p in pairs:
        print(f"{p['model']:10} {p['task']:16} {p['function']:8} quality {p['quality']:+.2f} {'useful' if p['useful'] else 'poor  '} fired: {', '.join(p['fired']) or '-'}")


if __name__ == "__main__":
    main()
