"""Which rule answers a call with labelled examples: the model's own answers, a rule on its label
probabilities, or a probe on its hidden states — chosen on the examples alone.

Three candidates, no search over more (a chooser over many candidates is noise at 16 examples):
1. the model's own answers (the likeliest label; AI.SCORE's expectation);
2. the label-probability rule (aisql.functions.decision: a threshold on P(Yes), per-label
   offsets, a monotone map of the score), kept only when its answers held out one at a time
   beat the model's own on the examples (issue 41's rule);
3. a probe on the hidden states (aisql.functions.probe), where the engine returned them and each
   class has two examples or more: taken only when its cross-validated quality beats the better
   of 1 and 2 by a margin — `MARGIN / sqrt(examples)`: more examples, a smaller margin — that
   the measurements across tasks and models set (benchmarks/probes.py, RESULTS.md §34).

Every candidate's quality on the examples is reported with a 95% bootstrap interval, so the
summary and `explain` can say how sure the choice is. The same examples give the same rule,
report and answers (every fit and resample is seeded): planned == naive holds.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from aisql.functions import decision, probe
from aisql.functions.decision import Decision
from aisql.functions.hidden_states import unpack_states

if TYPE_CHECKING:
    from aisql.functions.base import AIFunction, Task

# The probe's margin over the better label-probability candidate: MARGIN / sqrt(examples) in the
# function's quality (balanced accuracy; AI.SCORE: mean absolute error over a quarter of the
# scale's width). Measured (benchmarks/probes.py): see RESULTS.md §34.
MARGIN = 0.2
MIN_PER_CLASS = 2  # a probe needs this many examples of each class (a cross-validation fold each)

OWN = "the model's own answers"
LABEL_RULE = "rule on the label probabilities"
PROBE = "probe on the hidden states"


@dataclass(frozen=True)
class Choice:
    """What labelled examples chose: the rule (None: the model's own answers), the report, and
    the chosen rule's answers to the examples held out (what its quality was estimated from:
    a join compares its strategies on them)."""

    rule: Decision | None
    report: dict
    held_out: list


def learn(function: "AIFunction", task: "Task", rows: Sequence[Sequence[float]], labels: Sequence[Any], states: Sequence[bytes | None] | None) -> tuple[Decision | None, dict]:
    """The rule labelled examples support (None: the model's own answers) and its report."""
    choice = choose(function, task, rows, labels, states)
    return choice.rule, choice.report


def choose(function: "AIFunction", task: "Task", rows: Sequence[Sequence[float]], labels: Sequence[Any], states: Sequence[bytes | None] | None) -> Choice:
    """`learn`, with the chosen rule's held-out answers to the examples."""
    plain = dataclasses.replace(task, decision=None)
    own = [function.value_from_scores(plain, r) for r in rows]

    def held_out(train: list[int], i: int) -> Any:
        try:
            rule = function.fit_decision(plain, [rows[j] for j in train], [labels[j] for j in train])
        except ValueError:  # the others lack a class: the function's own answer
            return own[i]
        return function.value_from_scores(dataclasses.replace(task, decision=rule), rows[i])

    fitted = function.fit_decision(plain, rows, labels)
    loo = decision.leave_one_out(len(rows), held_out)
    quality = function.example_quality
    held, baseline = quality(loo, labels), quality(own, labels)
    kept = held > baseline
    own_rule = "the likeliest label" if function.probe_kind != probe.NUMBER else "the expected score"
    candidates = [_candidate(OWN, f"{own_rule} (the model's own answers)", own, labels, quality)]
    candidates.append(_candidate(LABEL_RULE, fitted.describe(), loo, labels, quality, "held out one at a time"))
    chosen, chosen_name, best, answers = (fitted, LABEL_RULE, held, loo) if kept else (None, OWN, baseline, own)

    why_not = _probe_unavailable(function, task, labels, states)
    if why_not is None:
        x = unpack_states(states)
        targets = [function.probe_target(task, label) for label in labels]
        kind = function.probe_kind
        predicted = [None if p is None else function.value_from_probe(task, p) for p in probe.cross_validated(x, targets, kind)]
        probe_quality = quality(predicted, labels)
        margin = MARGIN * margin_unit(function, task) / math.sqrt(len(labels))
        fitted_probe = probe.fit(x, targets, kind)
        candidates.append(_candidate(PROBE, fitted_probe.describe(), predicted, labels, quality, f"{len(probe.folds(targets, kind))}-fold cross-validated"))
        if probe_quality >= best + margin:
            chosen, chosen_name, best, answers = Decision("examples", probe=fitted_probe), PROBE, probe_quality, predicted
    report = {
        "examples": len(rows),
        "rule": chosen.describe() if chosen is not None else own_rule,
        "chosen": chosen_name,
        "kept": chosen is not None,
        "metric": function.quality_name,
        "held_out": round(best, 4),
        "model_own": round(baseline, 4),
        "candidates": candidates,
    }
    if why_not is not None:
        report["probe"] = why_not
    return Choice(chosen, report, answers)


def margin_unit(function: "AIFunction", task: "Task") -> float:
    """The quality's unit for the margin: 1 for balanced accuracy; a quarter of AI.SCORE's scale
    (its mean absolute error on a 1-5 scale is read against 1 point)."""
    if function.probe_kind == probe.NUMBER:
        return (float(task.labels[-1]) - float(task.labels[0])) / 4.0
    return 1.0


def _probe_unavailable(function: "AIFunction", task: "Task", labels: Sequence[Any], states) -> str | None:
    """Why no probe is fitted (None: one is)."""
    if function.probe_kind is None:
        return "this function has no probe"
    if states is None:
        return "the engine returns no hidden states (vLLM, a remote server)"
    if any(s is None for s in states):
        return "some examples' hidden states are missing"
    if len({len(s) for s in states}) != 1:
        return "the examples' hidden states differ in size"
    if function.probe_kind == probe.CLASSES:
        counts: dict[str, int] = {}
        for label in labels:
            counts[repr(label)] = counts.get(repr(label), 0) + 1
        if min(counts.values()) < MIN_PER_CLASS:
            return f"a probe needs {MIN_PER_CLASS} examples of each answer"
    elif len(labels) < 2 * MIN_PER_CLASS:
        return f"a probe needs {2 * MIN_PER_CLASS} examples"
    return None


def _candidate(name: str, rule: str, predicted: list, labels: Sequence[Any], quality, how: str = "on the examples") -> dict:
    """One candidate's quality on the examples, with its 95% bootstrap interval."""
    keep = [i for i, p in enumerate(predicted) if p is not None]
    shown_predicted, shown_labels = [predicted[i] for i in keep], [labels[i] for i in keep]
    value = quality(shown_predicted, shown_labels)
    low, high = probe.interval(shown_predicted, shown_labels, quality)
    return {"name": name, "rule": rule, "quality": _rounded(value), "low": _rounded(low), "high": _rounded(high), "how": how}


def _rounded(value: float) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else round(float(value), 4)


