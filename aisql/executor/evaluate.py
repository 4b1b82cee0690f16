"""Ask the engine for the answers to a set of distinct prompt texts of one task.

Prompts are encoded in the model's format, checked against its context length before anything
runs, ordered by token ids so prompts sharing a prefix are adjacent (the engine's batches and KV
cache both profit), and sent as one request list.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from aisql.engine.base import Engine, GenerateRequest, ScoreRequest
from aisql.errors import ModelError
from aisql.executor.answers import Answer
from aisql.executor.tasks import Task


def evaluate(
    engine: Engine,
    task: Task,
    texts: Sequence[str],
    *,
    naive: bool = False,
    group_by: Callable[[str], tuple] | None = None,
) -> dict[str, Answer]:
    """Answers for distinct `texts`. `naive`: no KV reuse and no speculation (the reference).

    Prompts run in token order — depth-first over their prefix tree — within groups given by
    `group_by` (an AI join's anchor values, when the anchor is not the prompt's leading part)."""
    if not texts:
        return {}
    ids = engine.encode_prompts(task.instruction, list(texts))
    label_ids = tuple(engine.encode_label(label) for label in task.labels) if task.scores_labels else ()
    _check_context(engine, task, texts, ids, label_ids)
    if group_by is None:
        order = sorted(range(len(texts)), key=lambda i: ids[i])
    else:
        order = sorted(range(len(texts)), key=lambda i: (group_by(texts[i]), ids[i]))
    answers: dict[str, Answer] = {}
    if task.scores_labels:
        requests = [ScoreRequest(ids[i], label_ids) for i in order]
        for i, request, scores in zip(order, requests, engine.score(requests, reuse=not naive)):
            best = scores.best
            answers[texts[i]] = Answer(
                value=task.value_of_label(best),
                cost=request.standalone_tokens(),
                score=math.exp(scores.logprobs[best]),
            )
    else:
        room = engine.info.max_context
        requests = [GenerateRequest(ids[i], min(task.max_tokens or 1, room - len(ids[i]))) for i in order]
        for i, request, generation in zip(
            order, requests, engine.generate(requests, reuse=not naive, speculative=not naive)
        ):
            answers[texts[i]] = Answer(value=generation.text, cost=generation.standalone_tokens(request))
    return answers


def _check_context(engine: Engine, task: Task, texts, ids, label_ids) -> None:
    needed = max((len(label) for label in label_ids), default=1)
    limit = engine.info.max_context
    for text, prompt in zip(texts, ids):
        if len(prompt) + needed > limit:
            preview = text[:60] + ("..." if len(text) > 60 else "")
            raise ModelError(
                f"a prompt of {len(prompt)} tokens does not fit the model's context of {limit} tokens: {preview!r}",
                hint="shorten the values in the prompt (e.g. left(col, 2000)) or use a model with a longer context",
            )
