"""AI.IF(prompt) -> BOOLEAN: does the statement hold, is the answer to the question yes?
(BigQuery AI.IF, Snowflake AI_FILTER.)

Scored, not generated: one forward pass gives the probabilities of the two answers, and the more
likely one wins. As a predicate it filters rows in WHERE and joins them in JOIN ... ON.

The framing is chosen by measured accuracy with a real small model (SmolLM2-135M-Instruct, see
benchmarks/RESULTS.md §10): the user's prompt as the user's turn under the model's own default
system message, and the model's reply begun as "The answer is:" so that the next token is the
answer — " Yes" or " No". Asked for "TRUE"/"FALSE", or to answer "Yes"/"No" first thing, a small
instruct model puts almost no probability on either (it wants to begin "The review ...").
"""

from __future__ import annotations

from typing import Sequence

from aisql.engine.model.prompt_format import Framing
from aisql.functions.base import AIFunction, Options, Request, Task, best_label

LABELS = ("Yes", "No")
FRAMING = Framing(system=None, answer_prefix="The answer is:", label_prefix=" ")


class AiIf(AIFunction):
    name = "IF"
    spellings = ("AI.IF", "AI_FILTER", "AI_IF")
    sql_type = "BOOLEAN"
    request = Request.SCORE
    is_predicate = True
    approximates = True  # opt-in: a proxy answers the rows it is sure of (aisql.executor.cascade)
    duckdb_name = "ai_if"
    signature_hint = "AI.IF(PROMPT('... {column} ...'))"

    def task(self, options: Options) -> Task:
        return Task(self, FRAMING, LABELS)

    def value_from_scores(self, task: Task, logprobs: Sequence[float]) -> bool:
        return best_label(logprobs) == 0


FUNCTION = AiIf()
