"""What a run's answers say about themselves, without labels, per AI node: how AI.IF's P(Yes),
AI.CLASSIFY's labels and AI.SCORE's values are spread, what the node's decision rule did, and a
warning where the answers carry little signal — with what to try.

One source for every surface: the CLI's and the shell's summary (aisql.output), Python's
`warnings` (aisql.api), and dbt's end-of-run lines (aisql.dbt_plugin). The thresholds are chosen
by measurement against labelled tasks (benchmarks/decisions.py, RESULTS.md §27): what a warning
says is what it predicted there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from aisql.executor.report.run_stats import NodeStats, RunStats
from aisql.functions.learning import PROBE

# AI.IF: a node of at least SIGNAL_MIN distinct prompts is said to carry little signal when any
# of these hold. Measured on 15 labelled task x model pairs (RESULTS.md §27): together they fire on
# every pair whose P(Yes) ranks the labels with AUC < 0.6 but one (SmolLM2 on GGR posts, AUC 0.45:
# spread out and confidently wrong, which nothing label-free tells from a working model), and on
# one pair of AUC >= 0.75 (Qwen2.5-1.5B on GGR beer: Yes to 99%, AUC 0.81 — a threshold from
# examples recovers it). A share near a coin toss of 25% (the earlier rule) also warned on
# Qwen2.5-0.5B's pdmx answers (41% near, AUC 0.87).
SIGNAL_MIN = 20
NEAR_CHANCE_SHARE = 0.45  # this share of answers at P(Yes) 0.4-0.6: the model is close to guessing
ONE_SIDED_SHARE = 0.95  # this share of answers on one side: the question was likely not read, or the model defaults
FLAT_LOG_ODDS_SD = 0.25  # log-odds of P(Yes) spread less than this across prompts: the answers barely depend on the data
# AI.CLASSIFY: one label for this share of the distinct prompts, or label distributions nearly even
# (mean entropy this share of the most). Measured on 14 labelled task x model pairs (RESULTS.md §36,
# benchmarks/signal_quality.py): the share at 0.85 fires on 6 of the 7 pairs whose balanced accuracy
# is within 0.15 of chance and on none of the 7 above (0.95 caught 5 of 7); the entropy at 0.9 on 1
# of the 7 and none above (at 0.85 it would be a hair from Qwen2.5-0.5B's useful sembench_rating, 0.84).
DOMINANT_LABEL_SHARE = 0.85
FLAT_LABEL_ENTROPY = 0.9
# AI.SCORE: values spread less than this share of the scale's width (standard deviation; SemBench Q9:
# SmolLM2 0.11 on 1-5, Spearman 0.07 with the critics; Qwen2.5-0.5B 0.56, Spearman 0.57)
BUNCHED_SCORE_SHARE = 0.06
TRY = "give a few labelled rows (examples => (SELECT ..., label FROM ...)), rephrase the question, or use a larger model (--model)"
TRY_COLLAPSED = (
    "a few labelled rows (examples => (SELECT ..., label FROM ...)) learn how far to shift each label, "
    "which often fixes a model that leans to one label; else rephrase the labels or the question, or use a larger model (--model)"
)
TRY_GENERATED = "rephrase the question, or use a larger model (--model)"
TRY_LABELLED = "label more rows (aisql label), rephrase the question, or use a larger model (--model)"


@dataclass(frozen=True)
class QualityLine:
    node: str
    text: str
    warning: bool  # a warning (the answers carry little signal), else information


def quality_lines(stats: RunStats | Iterable[NodeStats]) -> list[QualityLine]:
    """The quality lines of every node of a run (or of the DuckDB functions' counts)."""
    nodes = stats.nodes if isinstance(stats, RunStats) else list(stats)
    lines: list[QualityLine] = []
    for node in nodes:
        before = len(lines)
        lines += _decision_lines(node)
        if node.join and node.join.get("against") == "labels":
            strategy = "join as classification" if node.join["strategy"] == "classify" else "the exact plan (every pair asked)"
            lines.append(QualityLine(node.node, f"{node.node}: {strategy} {node.join['verdict']}", False))
        if node.answers_scored:
            lines += _yes_no_lines(node)
        elif node.value_counts:
            lines += _labelled_lines(node)
        elif node.generated_values and any(k != "NULL" for k in node.generated_values):
            lines += _typed_lines(node)
        elif node.answers_generated >= SIGNAL_MIN and not node.generated_differ:
            lines.append(
                QualityLine(
                    node.node,
                    f"{node.node}'s answers carry little signal: the same answer {node.first_generated!r} for all "
                    f"{node.answers_generated:,} distinct prompts; rephrase the question, or use a larger model (--model)",
                    True,
                )
            )
        if (node.decision or {}).get("source") == "examples":
            lines[before:] = _under_examples(node, lines[before:])
    return lines


def _under_examples(node: NodeStats, lines: list[QualityLine]) -> list[QualityLine]:
    """Labelled examples measure what the label-free signals can only guess. Where the rule they
    chose is measured above chance, a label-free warning (read on the model's own answers) is said
    as information — the rule answers instead; where its interval reaches chance, the examples'
    verdict replaces them (it is measured); with no interval, they stay."""
    verdict = _examples_warning(node)
    if verdict:
        return [line for line in lines if not line.warning] + verdict
    if not _examples_measured(node):
        return lines
    return [line if not line.warning else QualityLine(line.node, _without_advice(line.text) + "; the labelled examples' rule answers instead", False) for line in lines]


def _without_advice(text: str) -> str:
    for advice in (TRY, TRY_COLLAPSED, TRY_GENERATED):
        text = text.replace(f"; {advice}", "")
    return text.replace("carry little signal", "alone carry little signal", 1)


def _examples_measured(node: NodeStats) -> bool:
    report = node.decision or {}
    chosen = next((c for c in report.get("candidates") or [] if c["name"] == report.get("chosen")), None)
    return chosen is not None and chosen.get("low") is not None


def _examples_warning(node: NodeStats) -> list[QualityLine]:
    """A warning where the answering rule's interval on the labelled examples reaches chance: the
    examples show no measurable signal in these answers."""
    report = node.decision or {}
    chosen = next((c for c in report.get("candidates") or [] if c["name"] == report.get("chosen")), None)
    if chosen is None or chosen.get("low") is None:
        return []
    metric = report.get("metric", "")
    classes = max(len(report.get("per_label") or {}), 2)
    chance = {"balanced accuracy": 1.0 / classes, "Spearman": 0.0}.get(metric)
    if chance is None or chosen["low"] > chance:
        return []
    return [
        QualityLine(
            node.node,
            f"{node.node}'s answers carry no measurable signal on its {report['examples']} labelled examples: {chosen['rule']} "
            f"{metric} {_estimate(chosen, False)}, chance {chance:.2f}; {TRY_LABELLED}",
            True,
        )
    ]


def warnings_of(stats: RunStats | Iterable[NodeStats]) -> list[str]:
    return [line.text for line in quality_lines(stats) if line.warning]


def log_odds_sd(node: NodeStats) -> float:
    n = node.answers_scored
    mean = node.log_odds_sum / n
    return math.sqrt(max(node.log_odds_squares / n - mean * mean, 0.0))


def _yes_no_lines(node: NodeStats) -> list[QualityLine]:
    scored, yes, near = node.answers_scored, node.answers_yes, node.answers_near_boundary
    spread = log_odds_sd(node)
    lines = [
        QualityLine(
            node.node,
            f"{node.node} {node.function}: Yes for {yes / scored:.0%} of {scored:,} distinct prompts; "
            f"{near:,} ({near / scored:.0%}) near a coin toss (P(Yes) 0.4-0.6)",
            False,
        )
    ]
    if scored < SIGNAL_MIN:
        return lines
    reasons = []
    side = max(yes, scored - yes)
    if side / scored >= ONE_SIDED_SHARE:
        word = "Yes" if yes >= scored - yes else "No"
        reasons.append(f"{'all' if side == scored else f'{side / scored:.0%} of'} {scored:,} answers are {word}")
    if near / scored >= NEAR_CHANCE_SHARE:
        reasons.append(f"the model barely prefers one answer for {near / scored:.0%} of them (P(Yes) 0.4-0.6)")
    if spread < FLAT_LOG_ODDS_SD:
        reasons.append(f"P(Yes) hardly varies from prompt to prompt (log-odds spread {spread:.2f})")
    if reasons:
        lines.append(QualityLine(node.node, f"{node.node}'s answers carry little signal: {'; '.join(reasons)}; {TRY}", True))
    return lines


def _labelled_lines(node: NodeStats) -> list[QualityLine]:
    """AI.CLASSIFY's labels or AI.SCORE's values: the answers' spread, and the warnings read on the
    model's own answers (before any rule from examples: a monotone map widens AI.SCORE's spread
    without adding a ranking, an offset moves labels without reading the rows better)."""
    counts = node.value_counts
    own = node.own_value_counts or counts
    total = sum(counts.values())
    numeric = _numeric(counts)
    if numeric is not None:  # AI.SCORE: values
        low, high, sd = _spread(numeric)
        lines = [QualityLine(node.node, f"{node.node} {node.function}: values {low:g} to {high:g} over {total:,} distinct prompts (sd {sd:.2f})", False)]
        width = _scale_width(node)
        own_sd = _spread(_numeric(own) or numeric)[2]
        if width and total >= SIGNAL_MIN and own_sd < BUNCHED_SCORE_SHARE * width:
            whose = " (the model's own scores, before the examples' map)" if own is not counts else ""
            lines.append(
                QualityLine(node.node, f"{node.node}'s scores are bunched: sd {own_sd:.2f} on a scale {width:g} wide{whose}, most prompts score alike; {TRY}", True)
            )
        return lines
    top, top_count = max(counts.items(), key=lambda kv: kv[1])
    unused = [label for label in node.labels if label not in counts]
    lines = [
        QualityLine(
            node.node,
            f"{node.node} {node.function}: {top!r} for {top_count / total:.0%} of {total:,} distinct prompts"
            + (f"; never chosen: {', '.join(repr(u) for u in unused)}" if unused else ""),
            False,
        )
    ]
    return lines + _collapse_lines(node, own) if total >= SIGNAL_MIN else lines


def _collapse_lines(node: NodeStats, own: dict[str, int]) -> list[QualityLine]:
    """AI.CLASSIFY collapsed onto one label, or reading every row alike (measured: RESULTS.md §36)."""
    total = sum(own.values())
    top, top_count = max(own.items(), key=lambda kv: kv[1])
    reasons = []
    if top_count / total >= DOMINANT_LABEL_SHARE:
        mean = _mean_probability(node, top)
        believed = f" while the model gives it {mean:.0%} probability on average" if mean is not None else ""
        unused = [label for label in node.labels if label not in own]
        never = f"; never chosen: {', '.join(repr(u) for u in unused)}" if unused else ""
        reasons.append(f"{top!r} for {top_count / total:.0%} of {total:,} prompts{believed}{never} (unless the rows really are that alike)")
    if node.label_distributions >= SIGNAL_MIN and node.label_entropy_sum / node.label_distributions >= FLAT_LABEL_ENTROPY:
        reasons.append(f"the labels' probabilities are nearly even for most rows (entropy {node.label_entropy_sum / node.label_distributions:.0%} of the most)")
    if not reasons:
        return []
    whose = " (the model's own labels, before the examples' rule)" if own is not node.value_counts else ""
    return [QualityLine(node.node, f"{node.node}'s answers carry little signal{whose}: {'; '.join(reasons)}; {TRY_COLLAPSED}", True)]


def _mean_probability(node: NodeStats, label: str) -> float | None:
    if not node.label_distributions or label not in node.labels or len(node.label_probability_sums) != len(node.labels):
        return None
    return node.label_probability_sums[node.labels.index(label)] / node.label_distributions


def _spread(values: list[tuple[float, int]]) -> tuple[float, float, float]:
    """(lowest, highest, standard deviation) of counted values."""
    total = sum(c for _, c in values)
    mean = math.fsum(v * c for v, c in values) / total
    sd = math.sqrt(max(math.fsum(c * (v - mean) ** 2 for v, c in values) / total, 0.0))
    return min(v for v, _ in values), max(v for v, _ in values), sd


def _typed_lines(node: NodeStats) -> list[QualityLine]:
    """A typed generator's answers: true/false shares (AI.GENERATE_BOOL) or the values' range,
    and a warning where they say nothing of the rows — one side for ONE_SIDED_SHARE of them, or
    a single value."""
    counts = node.generated_values
    total = sum(counts.values())
    answered = {k: c for k, c in counts.items() if k != "NULL"}
    nulls = f" ({counts['NULL']:,} NULL: no literal of the type)" if counts.get("NULL") else ""
    if set(answered) <= {"true", "false"}:
        yes = answered.get("true", 0) / total
        lines = [QualityLine(node.node, f"{node.node} {node.function}: true for {yes:.0%} of {total:,} distinct prompts{nulls}", False)]
        top = max(answered.values()) / total
        if total >= SIGNAL_MIN and top >= ONE_SIDED_SHARE:
            side = "true" if answered.get("true", 0) >= answered.get("false", 0) else "false"
            lines.append(QualityLine(node.node, f"{node.node}'s answers carry little signal: {side} for {top:.0%} of {total:,} prompts; {TRY_GENERATED}", True))
        return lines
    values = sorted(float(k) for k in answered)
    lines = [QualityLine(node.node, f"{node.node} {node.function}: values {values[0]:g} to {values[-1]:g} over {total:,} distinct prompts{nulls}", False)]
    if total >= SIGNAL_MIN and len(values) == 1:
        lines.append(QualityLine(node.node, f"{node.node}'s answers carry little signal: {values[0]:g} for every prompt; {TRY_GENERATED}", True))
    return lines


def _numeric(counts: dict[str, int]) -> list[tuple[float, int]] | None:
    try:
        return [(float(k), c) for k, c in counts.items()]
    except ValueError:
        return None


def _scale_width(node: NodeStats) -> float | None:
    try:
        scale = [float(label) for label in node.labels]
    except ValueError:
        return None
    return max(scale) - min(scale) if len(scale) > 1 else None


def _decision_lines(node: NodeStats) -> list[QualityLine]:
    report = node.decision
    if not report:
        return []
    source = report.get("source")
    changed = f"; changed {node.answers_changed:,} distinct answers from the likeliest label" if node.answers_changed else ""
    asked = report.get("prompts_evaluated", 0)
    cached = report.get("prompts_cached", 0)
    prompts = f" ({asked + cached:,} prompts: {asked:,} asked, {cached:,} from the result cache)" if asked + cached else ""
    if source == "examples":
        return [QualityLine(node.node, f"{node.node}: {examples_line(report)}{changed}{prompts}", False)]
    if source == "content_free":
        return [QualityLine(node.node, f"{node.node}: content-free calibration ({report.get('inputs', 0)} inputs): {report['rule']}{changed}{prompts}", False)]
    if source == "batch":
        return [
            QualityLine(
                node.node,
                f"{node.node}: batch calibration over its {report.get('inputs', 0):,} distinct prompts: {report['rule']}{changed} "
                "(answers depend on which rows reach the call)",
                False,
            )
        ]
    return []


def examples_line(report: dict) -> str:
    """What a call's labelled examples chose and how good each candidate was on them, in one line:
    answers under labels are the chosen rule applied to the model's reading of each row."""
    per_label = ", ".join(f"{count} {label}" for label, count in report.get("per_label", {}).items())
    metric = report["metric"].removesuffix(" (negated: higher is better)")
    negate = metric != report["metric"]  # AI.SCORE's quality is a negated error: shown as the error
    candidates = report.get("candidates") or []
    chosen = next((c for c in candidates if c["name"] == report.get("chosen")), None)
    if chosen is None:  # a report from before the candidates were kept
        return f"answers under labels from {report['examples']} labelled examples ({per_label}): {report['rule']}"
    others = ", ".join(f"{c['rule']} {_estimate(c, negate)} ({c['how']})" for c in candidates if c is not chosen)
    text = (
        f"answers under labels from {report['examples']} labelled examples ({per_label}): {chosen['rule']} — "
        f"{metric} {_estimate(chosen, negate)} ({chosen['how']}); beside it: {others}"
    )
    evidence = report.get("probe_evidence")
    if evidence is not None and chosen["name"] == PROBE and evidence["measure"].startswith("balanced log-loss"):
        text += f"; the probe's balanced log-loss on the examples is {evidence['gain']:.2f} below the offsets' (taken above {evidence['margin']:.2f})"
    if evidence is not None and "chance" in evidence and chosen["name"] != PROBE and evidence["gain"] >= evidence["margin"]:
        text += f"; the probe is not taken: its interval reaches chance ({evidence['chance']:.2f})"
    probe_shuffled = (evidence or {}).get("shuffled")
    if probe_shuffled is not None and chosen["name"] != PROBE and probe_shuffled["p"] > probe_shuffled["alpha"]:
        text += (
            f"; the probe is not taken: fitted on labels shuffled among the examples it ranked as well "
            f"{probe_shuffled['as_good']} times in {probe_shuffled['shuffles']} (p = {probe_shuffled['p']:.2f})"
        )
    shuffled = report.get("label_rule_shuffled")
    if shuffled is not None and not report.get("label_rule_kept"):
        text += (
            f"; the rule on the label probabilities is not kept: labels shuffled among the examples did as well "
            f"{shuffled['as_good']} times in {shuffled['shuffles']} (p = {shuffled['p']:.2f}; kept at p <= {shuffled['alpha']:g})"
        )
    if report.get("probe"):
        text += f"; no probe: {report['probe']}"
    return text


def _estimate(candidate: dict, negate: bool) -> str:
    """A candidate's quality on the examples with its 95% interval, e.g. 0.81 [0.62, 0.94]."""
    value, low, high = candidate.get("quality"), candidate.get("low"), candidate.get("high")
    if value is None:
        return "n/a"
    if negate:
        value, low, high = -value, (None if high is None else -high), (None if low is None else -low)
    return with_interval(value, low, high)


def with_interval(value: float, low: float | None, high: float | None) -> str:
    """An estimate from labelled rows, never bare: with its 95% interval, or saying it has none."""
    if low is None or high is None or math.isnan(low) or math.isnan(high):
        return f"{value:.2f} (too few examples to tell how sure)"
    return f"{value:.2f} [{low:.2f}, {high:.2f}]"
