"""Answers already paid for, keyed by (task signature, prompt text).

Every AI node of a run shares one store, so the same question asked by two calls (or twice in one
call) reaches the model once. `AnswerStore` is the interface the executor uses; the in-memory
implementation lives for one connection.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Answer:
    value: Any  # the SQL value: bool for IF, a label for CLASSIFY, text for GENERATE
    cost: int  # tokens a one-prompt-at-a-time engine runs for this prompt (logical accounting)
    score: float | None = None  # probability of the chosen label, for IF and CLASSIFY


class AnswerStore(Protocol):
    def get(self, task: str, text: str) -> Answer | None: ...

    def put_many(self, task: str, answers: dict[str, Answer]) -> None: ...


class MemoryAnswerStore:
    def __init__(self) -> None:
        self._answers: dict[tuple[str, str], Answer] = {}
        self._lock = threading.Lock()

    def get(self, task: str, text: str) -> Answer | None:
        return self._answers.get((task, text))

    def put_many(self, task: str, answers: dict[str, Answer]) -> None:
        with self._lock:
            for text, answer in answers.items():
                self._answers[(task, text)] = answer

    def __len__(self) -> int:
        return len(self._answers)
