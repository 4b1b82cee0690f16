"""AI.SCORE(prompt) -> DOUBLE: a rating on an integer scale, as the expected value of the model's
answer. (BigQuery AI.SCORE.)

Scored, not generated: one forward pass gives the probability of every value of the scale as the
answer, and the score is their expectation, sum(p(v) * v) over the scale's values with the
probabilities renormalised over the scale. So `ORDER BY AI.SCORE(...) LIMIT k` and
`AVG(AI.SCORE(...))` decode nothing, and the value is continuous — two rows the model would both
answer "4" still rank by how sure it is. Values written with several tokens in the model's
tokenizer ("10") are scored by their full likelihood, as AI.CLASSIFY's labels are.

The scale: the option `{'scale': [1, 10]}`, else the "N to M" the prompt's text states
(BigQuery's rubrics say "Score from 1 to 5 ..."; of several, the one a rating word leads: "For
ages 18 to 65, rate from 1 to 5" is 1..5; several equally plausible are an error), said in a
note on the run; else an error. At most 101 values.

Framing as AI.IF's (chosen by measured accuracy, benchmarks/RESULTS.md §10): the prompt under
the model's own system message, the reply begun "The score is:", each value scored after a space.
"""

from __future__ import annotations

import dataclasses
import decimal
import math
import re
from dataclasses import dataclass
from typing import Any, Sequence

from sqlglot import exp

from aisql.engine.model.prompt_format import Framing
from aisql.errors import BindError
from aisql.functions import arguments, decision
from aisql.functions.base import AIFunction, DuckDBParameter, Options, Request, Task
from aisql.functions.decision import Decision

FRAMING = Framing(system=None, answer_prefix="The score is:", label_prefix=" ")
MAX_VALUES = 101
_RANGE = re.compile(r"(?<![\d.])(-?\d+)\s+to\s+(-?\d+)(?!\.?\d)", re.IGNORECASE)


@dataclass(frozen=True)
class ScoreOptions(Options):
    scale: tuple[int, int] | None = None  # lowest and highest value, both included


def check_scale(spelling: str, low: Any, high: Any) -> tuple[int, int]:
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high)):
        raise BindError(f"{spelling}: the scale must be two integers, got {low!r} and {high!r}", hint="e.g. {'scale': [1, 5]}")
    if low >= high:
        raise BindError(f"{spelling}: the scale's lowest value {low} must be below its highest {high}")
    if high - low + 1 > MAX_VALUES:
        raise BindError(f"{spelling}: a scale of {high - low + 1} values is too long (at most {MAX_VALUES})")
    return low, high


_RATING_WORDS = re.compile(r"\b(rat(e|ing)|scor(e|ing)|scale|grade|grading|rank|from)\b", re.IGNORECASE)


def scale_in_text(text: str) -> tuple[int, int] | None:
    """The scale a prompt's text states: its one "N to M" ("Score from 1 to 5 ..." -> (1, 5)), or,
    where it holds several ("For ages 18 to 65, rate from 1 to 5"), the one a rating word
    (rate, score, scale, grade, from) leads in the same clause. None: no "N to M" at all.
    Raises AmbiguousScale where several are equally plausible."""
    matches = list(_RANGE.finditer(text))
    if len(matches) <= 1:
        return (int(matches[0].group(1)), int(matches[0].group(2))) if matches else None
    rated = [m for m in matches if _RATING_WORDS.search(_clause_before(text, m.start()))]
    led = [m for m in rated if re.search(r"\b(rat(e|ing)|scor(e|ing)|scale|grade|grading|rank)\b", _clause_before(text, m.start()), re.IGNORECASE)]
    chosen = led or rated
    if len(chosen) == 1:
        return int(chosen[0].group(1)), int(chosen[0].group(2))
    raise AmbiguousScale([m.group(0) for m in (chosen or matches)])


def _clause_before(text: str, position: int) -> str:
    """The words before `position` back to the clause's start (a comma, a full stop, a colon)."""
    start = max(text.rfind(mark, 0, position) for mark in ",.;:!?\n")
    return text[start + 1 : position]


class AmbiguousScale(ValueError):
    def __init__(self, candidates: list[str]) -> None:
        super().__init__(candidates)
        self.candidates = candidates


def _prompt_text(prompt: exp.Expression) -> str:
    """The literal text of a prompt as written (a string, a PROMPT template, a tuple of parts)."""
    if isinstance(prompt, exp.Literal) and prompt.is_string:
        return prompt.this
    if isinstance(prompt, exp.Anonymous) and prompt.name.upper() == "PROMPT" and prompt.expressions:
        first = prompt.expressions[0]
        return first.this if isinstance(first, exp.Literal) else ""
    if isinstance(prompt, exp.Tuple):
        return " ".join(item.this for item in prompt.expressions if isinstance(item, exp.Literal) and item.is_string)
    return " ".join(node.this for node in prompt.find_all(exp.Literal) if node.is_string)


class AiScore(AIFunction):
    name = "SCORE"
    spellings = ("AI.SCORE", "AI_SCORE")
    sql_type = "DOUBLE"
    request = Request.SCORE
    duckdb_name = "ai_score"
    duckdb_parameters = (DuckDBParameter("low", "INTEGER", "1"), DuckDBParameter("high", "INTEGER", "5"))
    signature_hint = "AI.SCORE(('Rate from 1 to 5 how positive this is: ', review))"

    def bind_arguments(self, spelling, positional, named):
        prompt, options, hints, vendor = super().bind_arguments(spelling, positional, named)
        if options.scale is None:
            try:
                scale = scale_in_text(_prompt_text(prompt))
            except AmbiguousScale as err:
                raise BindError(
                    f"{spelling}: the prompt states several ranges ({', '.join(repr(c) for c in err.candidates)}); which is the scale?",
                    hint="give it as an option, e.g. AI.SCORE(prompt, {'scale': [1, 5]})",
                ) from None
            if scale is None:
                raise BindError(
                    f"{spelling}: no scale: write it in the prompt ('from 1 to 5') or give it as an option",
                    hint="e.g. AI.SCORE(('Rate from 1 to 5: ', review)) or AI.SCORE(review, {'scale': [1, 5]})",
                )
            options = dataclasses.replace(options, scale=check_scale(spelling, *scale))
            # said on the run: the scale decides every value, and it was read, not given
            vendor = dataclasses.replace(vendor, notes=vendor.notes + (f"{spelling}: scale {scale[0]} to {scale[1]} read from the prompt's text",))
        return prompt, options, hints, vendor

    def read_options(self, spelling: str, positional: list[exp.Expression], named: dict[str, exp.Expression]) -> ScoreOptions:
        """`{'scale': [1, 10]}` in the options struct (the planner hints may sit beside it)."""
        struct = named.get("options")
        if struct is None and positional and isinstance(positional[0], exp.Struct):
            struct = positional[0]
        if not isinstance(struct, exp.Struct):
            return ScoreOptions()
        for item in list(struct.expressions):
            if isinstance(item, (exp.PropertyEQ, exp.Slice, exp.Kwarg)) and item.this.name.lower() == "scale":
                value = item.expression
                if not isinstance(value, exp.Array) or len(value.expressions) != 2:
                    raise BindError(f"{spelling}: option 'scale' must be [lowest, highest], e.g. [1, 5]")
                low, high = (arguments.literal_value(v) for v in value.expressions)
                struct.set("expressions", [x for x in struct.expressions if x is not item])
                if not struct.expressions:  # only the scale: no planner hints left
                    if named.get("options") is struct:
                        named.pop("options")
                    else:
                        positional.pop(0)
                return ScoreOptions(check_scale(spelling, low, high))
        return ScoreOptions()

    def options_from_values(self, low: Any = 1, high: Any = 5, *rest: Any) -> ScoreOptions:
        return ScoreOptions(check_scale(self.duckdb_name, low, high))

    def task(self, options: ScoreOptions) -> Task:
        low, high = options.scale
        return Task(self, FRAMING, tuple(str(v) for v in range(low, high + 1)))

    def possible_values(self, options: ScoreOptions) -> tuple[Any, ...]:
        """The scale's ends (an answer is an expectation between them)."""
        return tuple(float(v) for v in options.scale)

    decides = True
    quality_name = "mean absolute error (negated: higher is better)"

    def value_from_scores(self, task: Task, logprobs: Sequence[float]) -> float:
        rule = task.decision
        if rule is not None and rule.offsets is not None:
            logprobs = decision.shifted(logprobs, rule.offsets)
        top = max(logprobs)
        weights = [math.exp(lp - top) for lp in logprobs]
        total = math.fsum(weights)
        expectation = math.fsum(w * int(label) for w, label in zip(weights, task.labels)) / total
        if rule is not None and rule.points is not None:
            return decision.interpolate(rule.points, expectation)
        return expectation

    def example_label(self, task: Task, value: Any) -> float:
        low, high = int(task.labels[0]), int(task.labels[-1])
        if isinstance(value, decimal.Decimal) and value.is_finite():  # DuckDB's 4.5 is DECIMAL(2,1)
            value = float(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and low <= value <= high:
            return float(value)
        shown = value if isinstance(value, (int, float, str)) and not isinstance(value, bool) else repr(value)
        raise ValueError(f"a label of this AI.SCORE is a number from {low} to {high}, got {shown}")

    def fit_decision(self, task: Task, rows: Sequence[Sequence[float]], labels: Sequence[float]) -> Decision:
        if len(set(labels)) < 2:
            raise ValueError("examples of at least two scores are needed")
        expectations = [self.value_from_scores(task, r) for r in rows]
        return Decision("examples", points=decision.fit_monotone(expectations, labels))

    probe_kind = "number"

    def probe_target(self, task: Task, label: float) -> float:
        return float(label)

    def value_from_probe(self, task: Task, prediction: float) -> float:
        """A probe's number, held to the scale (a linear model can overshoot its ends)."""
        low, high = int(task.labels[0]), int(task.labels[-1])
        return min(max(float(prediction), float(low)), float(high))

    def choice_quality(self, predicted: Sequence[float], labels: Sequence[float]) -> float:
        """Rules are chosen by how they rank the examples (Spearman's rho; 0 where either side
        is constant): the map on the expectation keeps the model's ranking, so error on the
        scale cannot tell a probe that ranks better from a constant near the examples' mean."""
        return decision.spearman(predicted, labels)

    @property
    def choice_name(self) -> str:
        return "Spearman"

    def example_quality(self, predicted: Sequence[float], labels: Sequence[float]) -> float:
        return -math.fsum(abs(p - t) for p, t in zip(predicted, labels)) / len(labels)

    def accepts_value(self, task: Task, value) -> bool:
        """A probability-weighted mean of the scale's labels: within the scale."""
        scale = [int(label) for label in task.labels]
        return super().accepts_value(task, value) and min(scale) <= value <= max(scale)

    def describe_options(self, options: ScoreOptions) -> str:
        return f", scale => [{options.scale[0]}, {options.scale[1]}]" if options.scale else ""


FUNCTION = AiScore()
