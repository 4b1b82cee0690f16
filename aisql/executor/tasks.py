"""What each AI function asks the model, independent of any particular model.

A Task turns an AI call into an instruction (placed first, so every prompt of the call shares it
as a prefix), the user's rendered prompt, and either labels to score or a token budget. It also
converts the engine's answer into the SQL value of the call.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from aisql.sql.calls import AICall, AIKind

IF_LABELS = ("TRUE", "FALSE")
IF_INSTRUCTION = (
    "You are a careful data analyst. Decide whether the statement about the data is true. "
    "Answer TRUE or FALSE only."
)
CLASSIFY_INSTRUCTION = (
    "You are a careful data analyst. Classify the input into exactly one of these categories: {labels}. "
    "Answer with the category only."
)
GENERATE_INSTRUCTION = "You are a helpful assistant. Answer concisely."


@dataclass(frozen=True)
class Task:
    kind: AIKind
    instruction: str
    labels: tuple[str, ...] = ()
    max_tokens: int | None = None

    @property
    def signature(self) -> str:
        """Two calls with the same signature give the same answer to the same prompt text."""
        payload = "\x1f".join([self.kind.value, self.instruction, *self.labels, str(self.max_tokens)])
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def store_key(self, model_fingerprint: str) -> str:
        """Where this task's answers live in an answer store: per model, per task."""
        return f"{model_fingerprint}/{self.signature}"

    @property
    def scores_labels(self) -> bool:
        return self.kind is not AIKind.GENERATE

    def value_of_label(self, index: int):
        """SQL value for the winning label: BOOLEAN for IF, the label text for CLASSIFY."""
        if self.kind is AIKind.IF:
            return index == 0
        return self.labels[index]


def if_task() -> Task:
    return Task(AIKind.IF, IF_INSTRUCTION, IF_LABELS)


def classify_task(labels: tuple[str, ...]) -> Task:
    listed = ", ".join(repr(label) for label in labels)
    return Task(AIKind.CLASSIFY, CLASSIFY_INSTRUCTION.format(labels=listed), tuple(labels))


def generate_task(max_tokens: int) -> Task:
    return Task(AIKind.GENERATE, GENERATE_INSTRUCTION, max_tokens=max_tokens)


def task_for(call: AICall) -> Task:
    """The task of a planned AI call (the DuckDB functions of aisql.udfs build the same tasks)."""
    if call.kind is AIKind.IF:
        return if_task()
    if call.kind is AIKind.CLASSIFY:
        return classify_task(call.labels)
    return generate_task(call.max_tokens)
