"""Answers already paid for, keyed by (task signature, prompt text).

Every AI node of a run shares one store, so the same question asked by two calls (or twice in one
call) reaches the model once. `AnswerStore` is the interface the executor uses; the in-memory
implementation lives for one connection.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

if TYPE_CHECKING:
    from aisql.functions import Task

# A stored answer as the asking task answers it (aisql.functions.Task.read): the answer (its
# value decided again by the task's rule), None for an entry the task never answers with (edited
# or corrupt: asked again, replaced, counted), or STALE for an older entry lacking what the rule
# needs (asked again and replaced, silently).
Reader = Callable[["Answer"], Any]


def accepting(accepts: Callable[[Any], bool]) -> Reader:
    """A reader that keeps an answer whose value `accepts` takes, as it is."""
    return lambda answer: answer if accepts(answer.value) else None


@dataclass(frozen=True)
class Answer:
    value: Any  # the SQL value: bool for IF, a label for CLASSIFY, text for GENERATE
    cost: int  # tokens a one-prompt-at-a-time engine runs for this prompt (logical accounting)
    score: float | None = None  # probability of the chosen label, for IF and CLASSIFY
    # AI.IF: P(Yes) among Yes and No — how sure the answer is (run summaries count answers near
    # 0.5). None for other functions, and for answers cached before it was kept.
    p_yes: float | None = None
    # A scored task's raw log-probability of every label, in the task's label order: what the
    # value is decided from (aisql.functions.decision), so a threshold, an offset or a
    # calibration is applied on read and changing the rule costs no model time. None for
    # generated answers, and for scored answers cached before they were kept.
    logprobs: tuple[float, ...] | None = None
    # The model's final hidden state where the answer starts (aisql.functions.hidden_states: float16
    # bytes), kept for calls with labelled examples: a probe fitted on the examples' states decides
    # the value (aisql.functions.probe), and changed examples ask the model nothing. None elsewhere.
    state: bytes | None = None

    def __reduce__(self):
        """Pickled as a plain tuple: workers send answers a shard at a time (~40% less to unpickle)."""
        return (Answer, (self.value, self.cost, self.score, self.p_yes, self.logprobs, self.state))

    def without_state(self) -> "Answer":
        """The answer as a reader that has no use for its state keeps it (a node's answers in memory)."""
        return self if self.state is None else Answer(self.value, self.cost, self.score, self.p_yes, self.logprobs)


@dataclass
class AnswerColumns:
    """Answers as lists (a streamed shard's, in the order of its texts): a few pickled lists cross
    a process boundary, and are read, faster than an object per answer — millions a node."""

    values: list
    costs: list[int]
    scores: list
    p_yes: list
    logprobs: list
    states: list

    @classmethod
    def of(cls, answers: Sequence[Answer]) -> "AnswerColumns":
        return cls(
            [a.value for a in answers],
            [a.cost for a in answers],
            [a.score for a in answers],
            [a.p_yes for a in answers],
            [a.logprobs for a in answers],
            [a.state for a in answers],
        )

    def __len__(self) -> int:
        return len(self.values)

    def answers(self) -> list[Answer]:
        return list(map(Answer, self.values, self.costs, self.scores, self.p_yes, self.logprobs, self.states))


class AnswerStore(Protocol):
    """`task` namespaces the answers: the model's fingerprint and the task's signature."""

    def get_many(self, task: str, texts, read: Reader | None = None) -> dict[str, Answer]:
        """The stored answers of `texts`, each as `read` makes it; what `read` refuses (an edited
        or corrupt cache entry, an older one) is left out, so the caller asks the model again and
        `put_many` replaces it."""

    def put_many(self, task: str, answers: dict[str, Answer]) -> None:
        """Store (and, for persistent stores, commit) the answers."""


class MemoryAnswerStore:
    def __init__(self) -> None:
        self._answers: dict[tuple[str, str], Answer] = {}
        self._lock = threading.Lock()
        self.committed = 0  # answers stored (kept for this process's life only)

    def get_many(self, task: str, texts, read: Reader | None = None) -> dict[str, Answer]:
        found = {}
        for text in texts:
            answer = self._answers.get((task, text))
            if answer is not None and read is not None:
                answer = read(answer)
            if isinstance(answer, Answer):
                found[text] = answer
        return found

    def put_many(self, task: str, answers: dict[str, Answer]) -> None:
        with self._lock:
            for text, answer in answers.items():
                self._answers[(task, text)] = answer
            self.committed += len(answers)

    def __len__(self) -> int:
        return len(self._answers)


def reader_of(task: "Task") -> Reader:
    """How a task reads stored answers into memory: as it decides them (Task.read), without the
    hidden states unless it fits on them (a node of a million prompts keeps values, not vectors)."""
    if task.returns_states or not task.keeps_states:
        return task.read

    def read(answer: Answer):
        found = task.read(answer)
        return found.without_state() if isinstance(found, Answer) else found

    return read


def in_memory(task: "Task", answers: dict[str, Answer]) -> dict[str, Answer]:
    """Fresh answers as the asker keeps them (reader_of): their states are in the store already."""
    if task.returns_states or not task.keeps_states:
        return answers
    return {text: answer.without_state() for text, answer in answers.items()}
