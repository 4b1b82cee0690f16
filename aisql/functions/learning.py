"""Which rule answers a call with labelled examples: the model's own answers, a rule on its label
probabilities, or a probe on its hidden states — chosen on the examples alone.

Three candidates, no search over more (a chooser over many candidates is noise at 16 examples):
1. the model's own answers (the likeliest label; AI.SCORE's expectation);
2. the label-probability rule (aisql.functions.decision: a threshold on P(Yes), per-label
   offsets, a monotone map of the score), kept only when its answers held out one at a time
   beat the model's own on the examples (issue 41's rule) and labels that say nothing of the
   rows could not have done as well: the examples' labels shuffled among them SHUFFLES times
   (seeded), the rule fitted and held out on each, its held-out quality reached by no more than
   a share ALPHA (a permutation test, exact for a coin flip's labels). Without it a rule fitted
   on coin-flip labels was kept in 44% of draws and changed a quarter of the answers;
   with it 5% and 3% (RESULTS.md §34b);
3. a probe on the hidden states (aisql.functions.probe), where the engine returned them and each
   class has two examples or more: taken only when it is clearly better on the examples, by a
   margin of `MARGIN / sqrt(examples)` — more examples, a smaller margin. For AI.IF and
   AI.CLASSIFY "better" is a lower balanced log-loss than issue 41's fitted offsets over five
   repeated cross-validations on the same folds (a proper score: on 16 examples accuracy moves
   in steps of 1/8 per class and chose a worse probe on SemBench's 3-class ratings); for AI.SCORE
   a higher cross-validated Spearman than the rule that would answer. And it must read the
   labels at all — on noise a probe is less wrong than offsets on a model sure of the wrong
   label, so the margin over the offsets alone took probes fitted on coin flips: for AI.IF and
   AI.CLASSIFY the 95% interval of its cross-validated balanced accuracy lies above chance (the
   summary's own test of "no measurable signal": a probe it would warn about is never chosen);
   for AI.SCORE the permutation test above, the probe fitted again on each shuffle. The rule and the margin
   were chosen on SmolLM2's and Qwen2.5-0.5B's tasks and checked on Qwen2.5-1.5B's
   (benchmarks/probes.py, RESULTS.md §34).

Every candidate's quality on the examples is reported with a 95% bootstrap interval, so the
summary and `explain` can say how sure the choice is. The same examples give the same rule,
report and answers (every fit and resample is seeded): planned == naive holds.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import numpy as np

from aisql.functions import decision, probe
from aisql.functions.decision import Decision
from aisql.functions.hidden_states import unpack_states



class Task(Protocol):
    """What the chooser reads of a call's task (aisql.functions.base.Task): its labels."""

    labels: tuple[str, ...]


class AIFunction(Protocol):
    """What the chooser asks of an AI function (aisql.functions.base.AIFunction, which calls
    `learn` here): this module reads no more of it, so it imports nothing above it."""

    probe_kind: str | None
    choice_name: str

    def fit_decision(self, task: Task, rows: Sequence[Sequence[float]], labels: Sequence[Any]) -> Decision: ...
    def value_from_scores(self, task: Task, logprobs: Sequence[float]) -> Any: ...
    def value_from_probe(self, task: Task, prediction: Any) -> Any: ...
    def probe_target(self, task: Task, label: Any) -> Any: ...
    def example_quality(self, predicted: Sequence[Any], labels: Sequence[Any]) -> float: ...
    def choice_quality(self, predicted: Sequence[Any], labels: Sequence[Any]) -> float: ...

# The probe's margin: MARGIN / sqrt(examples) of balanced log-loss (AI.IF, AI.CLASSIFY: nats per
# example, the probe against the fitted offsets) or of Spearman's rho (AI.SCORE). Chosen on
# SmolLM2's and Qwen2.5-0.5B's tasks among 0-0.8 (benchmarks/probes.py, RESULTS.md §34).
MARGIN = 0.3
REPEATS = 5  # cross-validations behind the log-loss comparison (seeded)
MIN_PER_CLASS = 2  # a probe needs this many examples of each class (a cross-validation fold each)
# AI.SCORE: a probe below this many examples is not tried. With 8-16 the cross-validated Spearman
# is too noisy to choose by: on Qwen2.5-0.5B's SemBench scores (the expectation ranks at 0.57) it
# chose probes that ranked at 0.47 often enough to lose 0.04 (RESULTS.md §34).
MIN_SCORE_EXAMPLES = 32
# The label-probability rule's permutation test (module docstring): p = (1 + shuffles whose held-
# out quality is as good) / (1 + SHUFFLES), kept where p <= ALPHA. Chosen among sign tests, margins
# on the held-out gain and 0.05 / 0.1 on every task x model x size of §34, labels real and
# shuffled (benchmarks/label_rule_gate.py, RESULTS.md §34b): at 0.1 a rule on coin-flip labels is
# kept in 4.8% of draws (it must also beat the model's own), and 65% of the real labels' gain is
# kept; 0.05 keeps 2.3% and half the gain (AI.CLASSIFY at 2-4 examples per class loses most).
SHUFFLES = 39
ALPHA = 0.1
SHUFFLE_SEED = 9000

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

    def held_out(shown: Sequence[Any]) -> list:
        return held_out_answers(function, task, rows, shown, own)

    fitted = function.fit_decision(plain, rows, labels)
    loo = held_out(labels)
    observed = function.example_quality(loo, labels)
    beats_own = observed > function.example_quality(own, labels)  # issue 41's check
    shuffled = shuffled_labels_test(lambda shown: function.example_quality(held_out(shown), shown), labels, observed) if beats_own else None
    kept = shuffled is not None and shuffled["p"] <= ALPHA
    quality = function.choice_quality  # how the candidates are compared and reported
    held, baseline = quality(loo, labels), quality(own, labels)
    own_rule = "the likeliest label" if function.probe_kind != probe.NUMBER else "the expected score"
    candidates = [_candidate(OWN, f"{own_rule} (the model's own answers)", own, labels, quality)]
    candidates.append(_candidate(LABEL_RULE, fitted.describe(), loo, labels, quality, "held out one at a time"))
    chosen, chosen_name, best, answers = (fitted, LABEL_RULE, held, loo) if kept else (None, OWN, baseline, own)

    why_not = _probe_unavailable(function, task, labels, states)
    evidence = None
    if why_not is None:
        taken, evidence = _try_probe(function, task, rows, labels, states, candidates, best)
        if taken is not None:
            chosen, best, answers = taken
            chosen_name = PROBE
    report = {
        "examples": len(rows),
        "rule": chosen.describe() if chosen is not None else own_rule,
        "chosen": chosen_name,
        "kept": chosen is not None,
        "label_rule_kept": kept,  # the probe was compared with this rule, else the model's own
        "metric": function.choice_name,
        "held_out": round(best, 4),
        "model_own": round(baseline, 4),
        "candidates": candidates,
    }
    if shuffled is not None:
        report["label_rule_shuffled"] = shuffled  # why the label-probability rule was kept or not
    if why_not is not None:
        report["probe"] = why_not
    if evidence is not None:
        report["probe_evidence"] = evidence  # what decided: the probe taken where gain >= margin and shuffled["p"] <= alpha
    return Choice(chosen, report, answers)


def _try_probe(function: "AIFunction", task: "Task", rows, labels: Sequence[Any], states, candidates: list, best: float):
    """The probe on the hidden states as a candidate (appended to `candidates`), and whether it is
    taken over the rule chosen so far (quality `best`): ((its decision, quality, answers) or
    None, the evidence that decided)."""
    quality = function.choice_quality
    x = unpack_states(states)
    targets = [function.probe_target(task, label) for label in labels]
    kind = function.probe_kind
    predicted = [None if p is None else function.value_from_probe(task, p) for p in probe.cross_validated(x, targets, kind)]
    probe_quality = quality(predicted, labels)
    fitted_probe = probe.fit(x, targets, kind)
    candidates.append(_candidate(PROBE, fitted_probe.describe(), predicted, labels, quality, f"{len(probe.folds(targets, kind))}-fold cross-validated"))
    margin = MARGIN / math.sqrt(len(labels))
    if kind == probe.CLASSES:  # a proper score on the same folds, repeated: the accuracy of a few examples is too coarse to choose by
        gain = log_loss_gain(x, targets, rows, len(task.labels))
        evidence = {"measure": "balanced log-loss, the probe against the fitted offsets", "gain": round(gain, 4), "margin": round(margin, 4)}
        reads_labels, evidence["chance"] = above_chance(candidates[-1], labels)
    else:
        gain = probe_quality - best
        evidence = {"measure": function.choice_name, "gain": round(gain, 4), "margin": round(margin, 4)}
        if gain >= margin:  # only then does the test decide (ridge refits are cheap: 39 x 5 at most)
            evidence["shuffled"] = probe_reads_labels(x, targets, kind)
        reads_labels = "shuffled" not in evidence or evidence["shuffled"]["p"] <= ALPHA
    if gain >= margin and reads_labels:
        return (Decision("examples", probe=fitted_probe), probe_quality, predicted), evidence
    return None, evidence


def held_out_answers(function: "AIFunction", task: "Task", rows: Sequence[Sequence[float]], labels: Sequence[Any], own: Sequence[Any]) -> list:
    """The label-probability rule's answers to the examples held out one at a time, fitted on
    `labels` (the real ones, or shuffled for the permutation test); where the others lack a
    class, the model's own answer (`own`)."""
    plain = dataclasses.replace(task, decision=None)

    def fit_and_predict(train: list[int], i: int) -> Any:
        try:
            rule = function.fit_decision(plain, [rows[j] for j in train], [labels[j] for j in train])
        except ValueError:
            return own[i]
        return function.value_from_scores(dataclasses.replace(task, decision=rule), rows[i])

    return decision.leave_one_out(len(rows), fit_and_predict)


def shuffled_labels_test(held_out_quality, labels: Sequence[Any], observed: float) -> dict:
    """How often labels shuffled among the same examples — labels that say nothing of the rows,
    as a coin flip's — give the rule a held-out quality as good as the real labels' `observed`:
    {"p", "as_good", "shuffles", "alpha"}, p = (1 + as_good) / (1 + SHUFFLES). Seeded: the same examples
    give the same p (planned == naive). Stops as soon as p can no longer reach ALPHA (most
    shuffles of noise end it early); `shuffles` says how many were run."""
    rng = np.random.default_rng(SHUFFLE_SEED)
    allowed = math.floor(ALPHA * (1 + SHUFFLES) - 1 + 1e-9)  # shuffles as good, at most, for p <= ALPHA
    as_good = 0
    for done in range(1, SHUFFLES + 1):
        order = rng.permutation(len(labels))
        as_good += held_out_quality([labels[i] for i in order]) >= observed
        if as_good > allowed:
            break
    return {"p": round((1 + as_good) / (1 + SHUFFLES), 4), "as_good": int(as_good), "shuffles": done, "alpha": ALPHA}


def above_chance(candidate: dict, labels: Sequence[Any]) -> tuple[bool, float]:
    """Whether a candidate's 95% interval of balanced accuracy on the examples lies above chance
    (one over the labels among them), and that chance: what the summary calls a measurable
    signal (aisql.executor.report.signals). A one-sided test at ALPHA instead (the bootstrap's 10%
    quantile) took probes on coin-flip labels in 10-11% of draws, against 3-5% (issue 58)."""
    chance = 1.0 / len({repr(label) for label in labels})
    return candidate["low"] is not None and candidate["low"] > chance, round(chance, 4)


def probe_reads_labels(states, targets: Sequence[float], kind: str) -> dict:
    """Whether an AI.SCORE probe's cross-validated answers read the labels at all:
    `shuffled_labels_test` of their Spearman, the probe fitted again on every shuffle — a
    permutation test, exact for a coin flip's labels. (AI.IF and AI.CLASSIFY probes show their
    interval above chance instead, from the cross-validation already run: refitting a logistic
    probe 39 x 5 times costs ~15 s a call on a 576-wide state.)"""
    targets = list(targets)

    def quality(shown: Sequence) -> float:
        return decision.spearman(probe.cross_validated(states, list(shown), kind), list(shown))

    return shuffled_labels_test(quality, targets, quality(targets))


def log_loss_gain(states, targets: Sequence[int], rows: Sequence[Sequence[float]], labels: int) -> float:
    """How much lower the probe's balanced log-loss is than the label-probability rule's (issue
    41's offsets, fitted on the same folds), over REPEATS seeded stratified cross-validations:
    positive where the probe is better. Each fold's two rules see the same examples."""
    targets = list(targets)
    gains = []
    for repeat in range(REPEATS):
        folds = probe.folds(targets, probe.CLASSES, seed=probe.SEED + repeat)
        probe_p = np.zeros((len(targets), labels))
        rule_p = np.zeros((len(targets), labels))
        for test in folds:
            train = np.setdiff1d(np.arange(len(targets)), test)
            train_targets = [targets[i] for i in train]
            fitted = probe.fit(states[train], train_targets, probe.CLASSES)
            probe_p[test] = fitted.probabilities(states[test], labels)
            offsets = decision.fit_bias([rows[i] for i in train], train_targets)
            rule_p[test] = decision.bias_probabilities([rows[i] for i in test], offsets)
        gains.append(decision.balanced_log_loss(rule_p, targets) - decision.balanced_log_loss(probe_p, targets))
    return float(np.mean(gains))


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
    elif len(labels) < MIN_SCORE_EXAMPLES:
        return f"a probe on a score needs {MIN_SCORE_EXAMPLES} examples"
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


