"""AI.IF(prompt) -> BOOLEAN: does the statement hold, is the answer to the question yes?
(BigQuery AI.IF, Snowflake AI_FILTER.)

Scored, not generated: one forward pass gives the probabilities of the two answers, and the more
likely one wins — or, with `{'min_confidence': x}`, TRUE only where P(Yes) among Yes and No is
at least x (a threshold of the user's, e.g. for precision over recall; its answers are cached
apart from the default's). As a predicate it filters rows in WHERE and joins them in JOIN ... ON.

The framing is chosen by measured accuracy with a real small model (SmolLM2-135M-Instruct, see
benchmarks/RESULTS.md §10): the user's prompt as the user's turn under the model's own default
system message, and the model's reply begun as "The answer is:" so that the next token is the
answer — " Yes" or " No". Asked for "TRUE"/"FALSE", or to answer "Yes"/"No" first thing, a small
instruct model puts almost no probability on either (it wants to begin "The review ...").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from aisql.engine.model.prompt_format import Framing
from aisql.functions import decision
from aisql.functions.base import AIFunction, Options, Request, Task, best_label
from aisql.functions.decision import Decision

LABELS = ("Yes", "No")
FRAMING = Framing(system=None, answer_prefix="The answer is:", label_prefix=" ")


@dataclass(frozen=True)
class IfOptions(Options):
    min_confidence: float | None = None  # TRUE when P(Yes) >= this; None: the likelier label


class AiIf(AIFunction):
    name = "IF"
    spellings = ("AI.IF", "AI_FILTER", "AI_IF")
    sql_type = "BOOLEAN"
    request = Request.SCORE
    is_predicate = True
    approximates = True  # opt-in: a proxy answers the rows it is sure of (aisql.executor.approximate.cascade)
    duckdb_name = "ai_if"
    signature_hint = "AI.IF(PROMPT('... {column} ...'))"

    decides = True

    def task(self, options: Options) -> Task:
        threshold = getattr(options, "min_confidence", None)
        return Task(self, FRAMING, LABELS, decision=Decision("min_confidence", threshold=threshold) if threshold is not None else None)

    def options_from_hints(self, spelling: str, options: Options, hints: dict[str, Any]) -> Options:
        threshold = hints.pop("min_confidence", None)
        return IfOptions(min_confidence=threshold) if threshold is not None else options

    def describe_options(self, options: Options) -> str:
        threshold = getattr(options, "min_confidence", None)
        return f", {{'min_confidence': {threshold:g}}}" if threshold is not None else ""

    def p_yes(self, logprobs: Sequence[float]) -> float:
        """P(Yes) among Yes and No, from the two labels' log-probabilities."""
        yes, no = logprobs[0], logprobs[1]
        return 1.0 / (1.0 + math.exp(min(700.0, no - yes)))

    def value_from_scores(self, task: Task, logprobs: Sequence[float]) -> bool:
        rule = task.decision
        if rule is not None and rule.threshold is not None:
            return self.p_yes(logprobs) >= rule.threshold
        return best_label(logprobs) == 0

    def value_from_answer(self, task: Task, answer: Any) -> Any:
        """Answers cached before every label's probability was kept still have P(Yes): enough
        for any threshold."""
        rule = task.decision
        if answer.logprobs is None and answer.p_yes is not None and (rule is None or not rule.needs_states):
            return answer.p_yes >= (rule.threshold if rule is not None and rule.threshold is not None else 0.5)
        return super().value_from_answer(task, answer)

    # ---- the decision rule ----------------------------------------------------------------------
    def value_from_probe(self, task: Task, prediction: int) -> bool:
        return prediction == 0  # the index of "Yes"

    def probe_target(self, task: Task, label: bool) -> int:
        return 0 if label else 1

    def example_label(self, task: Task, value: Any) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in _TRUTHS:
            return _TRUTHS[value.strip().lower()]
        raise ValueError(f"a label of AI.IF is TRUE or FALSE (or 'yes' / 'no'), got {value!r}")

    def fit_decision(self, task: Task, rows: Sequence[Sequence[float]], labels: Sequence[bool]) -> Decision:
        if all(labels) or not any(labels):
            raise ValueError("examples of both answers are needed")
        b_yes, b_no = decision.fit_bias(rows, [0 if label else 1 for label in labels])
        return Decision("examples", threshold=1.0 / (1.0 + math.exp(max(-700.0, min(700.0, b_yes - b_no)))))

    def calibrated(self, task: Task, rows: Sequence[Sequence[float]], source: str) -> Decision:
        return Decision(source, threshold=decision.calibration_threshold(rows))


_TRUTHS = {"yes": True, "true": True, "1": True, "y": True, "t": True, "no": False, "false": False, "0": False, "n": False, "f": False}


FUNCTION = AiIf()
