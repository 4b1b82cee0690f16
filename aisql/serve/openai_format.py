"""OpenAI's response shapes for `aisql serve`: a request's choices, their logprobs in the
completions and chat formats, usage with cached prompt tokens, and per-choice seeds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from aisql.engine.continuous import RequestHandle, ServeRequest
from aisql.serve.protocol import SEED_RANGE
from aisql.serve.text import TextStream


@dataclass
class Choice:
    """One choice of a request: its engine request, text stream and what came back."""

    index: int
    prompt_tokens: int
    text: TextStream
    request: ServeRequest
    handle: RequestHandle | None = None
    finish_reason: str | None = None
    completion_tokens: int = 0
    cached_tokens: int = 0
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[dict[int, float]] = field(default_factory=list)
    session: str | None = None  # the conversation the client named (replicas route it to one place)


@dataclass
class Delta:
    choice: Choice
    text: str
    token_ids: list[int]
    logprobs: list[float] | None
    top_logprobs: list[dict[int, float]] | None
    finish_reason: str | None = None


def completion_logprobs(choice: Choice, ids, logprobs, tops) -> dict:
    tokens = [choice.text.token_text(t) for t in ids]
    return {
        "tokens": tokens,
        "token_logprobs": list(logprobs or []),
        "top_logprobs": [{choice.text.token_text(t): lp for t, lp in top.items()} for top in (tops or [])],
        "text_offset": _offsets(tokens, len(choice.text.sent) - sum(len(t) for t in tokens)),
    }


def chat_logprobs(tokenizer, ids, logprobs, tops) -> list[dict]:
    out = []
    for token, logprob, top in zip(ids, logprobs or [], tops or [{}] * len(ids)):
        text = tokenizer.decode([token])
        out.append(
            {
                "token": text,
                "logprob": logprob,
                "bytes": list(text.encode()),
                "top_logprobs": [
                    {"token": tokenizer.decode([t]), "logprob": lp, "bytes": list(tokenizer.decode([t]).encode())}
                    for t, lp in top.items()
                ],
            }
        )
    return out


def choice_seed(seed: int, index: int) -> int:
    """The seed of choice `index` of a request seeded `seed`, kept in the range generators take."""
    return seed + index if seed + index <= SEED_RANGE[1] else (seed + index) % (SEED_RANGE[1] + 1)


def usage(choices: list[Choice], n: int) -> dict:
    prompt = sum(c.prompt_tokens for c in choices[::n]) if choices else 0
    completion = sum(c.completion_tokens for c in choices)
    cached = sum(c.cached_tokens for c in choices[::n]) if choices else 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def _offsets(tokens: list[str], start: int) -> list[int]:
    offsets, position = [], max(0, start)
    for token in tokens:
        offsets.append(position)
        position += len(token)
    return offsets


class ResponseFormat:
    """How one endpoint's choices are written: as a whole response, or as stream chunks."""

    id_prefix = ""
    chunk_object = ""

    def first(self, choice: Choice) -> dict | None:
        """A stream's opening chunk per choice (None: none)."""
        return None

    def chunk(self, delta: Delta) -> dict: ...

    def choice(self, choice: Choice, logprobs: bool) -> dict: ...

    def usage_n(self, sampling) -> int:
        """Choices per prompt, for usage's prompt tokens (each prompt counted once)."""
        return sampling.n

    def response(self, response_id: str, model: str, choices: list[Choice], sampling) -> dict:
        return {
            "id": response_id,
            "object": self.response_object,
            "created": int(time.time()),
            "model": model,
            "choices": [self.choice(c, sampling.logprobs is not None) for c in choices],
            "usage": usage(choices, self.usage_n(sampling)),
        }


class CompletionFormat(ResponseFormat):
    """/v1/completions."""

    id_prefix = "cmpl"
    chunk_object = response_object = "text_completion"

    def chunk(self, delta: Delta) -> dict:
        logprobs = completion_logprobs(delta.choice, delta.token_ids, delta.logprobs, delta.top_logprobs) if delta.logprobs is not None else None
        return {"index": delta.choice.index, "text": delta.text, "logprobs": logprobs, "finish_reason": delta.finish_reason}

    def choice(self, choice: Choice, logprobs: bool) -> dict:
        written = completion_logprobs(choice, choice.token_ids, choice.logprobs, choice.top_logprobs) if logprobs else None
        return {"index": choice.index, "text": choice.text.sent, "logprobs": written, "finish_reason": choice.finish_reason}


class ChatFormat(ResponseFormat):
    """/v1/chat/completions."""

    id_prefix = "chatcmpl"
    chunk_object = "chat.completion.chunk"
    response_object = "chat.completion"

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def first(self, choice: Choice) -> dict | None:
        return {"index": choice.index, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}

    def chunk(self, delta: Delta) -> dict:
        content = {"content": delta.text} if delta.text or delta.finish_reason is None else {}
        logprobs = {"content": chat_logprobs(self.tokenizer, delta.token_ids, delta.logprobs, delta.top_logprobs)} if delta.logprobs is not None else None
        return {"index": delta.choice.index, "delta": content, "logprobs": logprobs, "finish_reason": delta.finish_reason}

    def choice(self, choice: Choice, logprobs: bool) -> dict:
        written = {"content": chat_logprobs(self.tokenizer, choice.token_ids, choice.logprobs, choice.top_logprobs)} if logprobs else None
        message = {"role": "assistant", "content": choice.text.sent}
        return {"index": choice.index, "message": message, "logprobs": written, "finish_reason": choice.finish_reason}

    def usage_n(self, sampling) -> int:
        return 1  # one prompt, its n choices
