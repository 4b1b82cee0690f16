"""The executor's one table of engine request kinds (aisql.functions.Request): how each is asked.

A function names its kind; everything the executor does differently per kind is an entry here —
how prepared prompts become engine requests and answers, whether prompts
carry labels, how many model steps a prompt takes (shard weights), whether the texts are groups
to reduce, whether a worker pool can shard it. A new kind (say a listwise rerank) is one entry
plus its functions; the planner's cost model has its own table (aisql.planner.cost.ESTIMATORS).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass
from typing import Callable, Sequence

from aisql.engine.model.prompt_format import encode_labels
from aisql.engine.base import Engine, GenerateRequest, ScoreRequest
from aisql.errors import ModelError
from aisql.executor.store.answer_store import Answer
from aisql.functions import Request, Task
from aisql.functions.base import STALE
from aisql.functions.hidden_states import pack_state



@dataclass(frozen=True)
class Prepared:
    """A prompt text encoded in the model's format, ready for the engine (aisql.executor.answers.evaluate
    prepares them; a request kind runs them)."""

    text: str
    ids: tuple[int, ...]
    truncated: bool = False


RunPrepared = Callable[[Engine, Task, Sequence[Prepared], bool], dict[str, Answer]]  # (engine, task, items, naive)


@dataclass(frozen=True)
class RequestKind:
    run: RunPrepared | None  # prepared prompts -> answers in one engine call (None: not an LLM request)
    decode_steps: Callable[[Task], int]  # model steps per prompt beyond its prefill (shard weights)
    labels: bool = False  # prompts are scored against the task's labels (encoded once, checked against the context)
    groups: bool = False  # the texts are groups, reduced by map-reduce over GENERATE prompts (aisql.executor.answers.aggregate)
    shards: bool = True  # a worker pool can cut its prompts into prefix-group shards
    embedding: bool = False  # answered by the embedding model (aisql.executor.node.embedding_runtime), not the LLM


def _score(engine: Engine, task: Task, items: Sequence[Prepared], naive: bool) -> dict[str, Answer]:
    """Each prompt's labels scored in one forward pass (with its hidden state, where the task
    keeps them). The value is the task's rule applied to the answer as it is stored — the
    float16 state, not the pass's float32 one — so a fresh and a cached answer decide alike."""
    label_ids = encode_labels(engine.encode_label, engine.format.end_of_answer, task.labels, task.framing)
    keep = task.keeps_states
    requests = [ScoreRequest(p.ids, label_ids, keep_state=keep) for p in items]
    answers = {}
    for item, request, scores in zip(items, requests, engine.score(requests, reuse=not naive)):
        answers[item.text] = scored_answer(task, scores, request.standalone_tokens())
    return answers


def scored_answer(task: Task, scores, cost: int) -> Answer:
    """An engine's LabelScores as the answer kept: the labels' log-probabilities, the hidden state
    packed as stored, and the value the task's rule gives them."""
    function = task.function
    logprobs = tuple(float(lp) for lp in scores.logprobs)
    state = pack_state(scores.state) if scores.state is not None and task.keeps_states else None
    raw = Answer(
        value=None, cost=cost, score=math.exp(logprobs[scores.best]), p_yes=function.p_yes(logprobs), logprobs=logprobs, state=state
    )
    value = function.value_from_answer(task, raw)
    if value is STALE:  # a probe's rule on an engine that returned no state: never chosen so (aisql.executor.node.decisions)
        raise ModelError("this engine returned no hidden state for a prompt, and the call's rule (a probe) decides from it")
    return dataclasses.replace(raw, value=value)


def _generate(engine: Engine, task: Task, items: Sequence[Prepared], naive: bool) -> dict[str, Answer]:
    """Greedy decoding, batched with prefix reuse and speculation (planned), or seeded sampling."""
    if task.sampling is not None:
        return _sample(engine, task, items)
    function = task.function
    room = engine.info.max_context
    requests = [GenerateRequest(p.ids, min(task.max_tokens or 1, room - len(p.ids)), grammar=task.grammar) for p in items]
    generations = engine.generate(requests, reuse=not naive, speculative=not naive)
    return {
        item.text: Answer(value=function.value_from_text(task, generation.text), cost=generation.standalone_tokens(request))
        for item, request, generation in zip(items, requests, generations)
    }


def _sample(engine: Engine, task: Task, items: Sequence[Prepared]) -> dict[str, Answer]:
    """Seeded sampling: each prompt's draws come from a seed of (the call's seed, its text), and
    each prompt runs alone with nothing reused in either mode — identical numerics, so planned ==
    naive and a cached answer is the answer a rerun would draw."""
    function = task.function
    room = engine.info.max_context
    temperature, top_p, seed = task.sampling
    answers = {}
    for item in items:
        request = GenerateRequest(
            item.ids, min(task.max_tokens or 1, room - len(item.ids)), temperature=temperature, top_p=top_p, seed=_text_seed(seed, item.text)
        )
        (generation,) = engine.generate([request], reuse=False, speculative=False)
        answers[item.text] = Answer(value=function.value_from_text(task, generation.text), cost=generation.standalone_tokens(request))
    return answers


def _text_seed(seed: int, text: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}\x1f{text}".encode()).digest()[:8], "big") >> 1


def _max_tokens(task: Task) -> int:
    return max(1, task.max_tokens or 1)


KINDS: dict[Request, RequestKind] = {
    Request.SCORE: RequestKind(run=_score, decode_steps=lambda task: 1, labels=True),
    Request.GENERATE: RequestKind(run=_generate, decode_steps=_max_tokens),
    Request.EMBED: RequestKind(run=None, decode_steps=lambda task: 0, shards=False, embedding=True),
    Request.AGGREGATE: RequestKind(run=None, decode_steps=_max_tokens, groups=True, shards=False),
}


def kind_of(task_or_request: Task | Request) -> RequestKind:
    request = task_or_request if isinstance(task_or_request, Request) else task_or_request.request
    return KINDS[request]
