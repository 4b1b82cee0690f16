"""The OpenAI request shapes `aisql serve` accepts, checked field by field.

A bad request becomes an `ApiError` with the OpenAI error body (`message`, `type`, `param`,
`code`) and a 4xx status; nothing reaches the engine until a request is fully valid. Fields we do
not act on (`user`, `frequency_penalty` = 0, ...) are accepted and ignored, as OpenAI-compatible
servers do; fields we cannot honour are refused by name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

MAX_N = 16
MAX_TOP_LOGPROBS = 20
MAX_STOP_SEQUENCES = 4


class ApiError(Exception):
    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        status: int = 400,
        kind: str = "invalid_request_error",
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.kind = kind
        self.code = code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


@dataclass
class Sampling:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    n: int = 1
    logprobs: int | None = None  # None: no logprobs; k >= 0: chosen token plus top k
    allowed_token_ids: list[int] | None = None  # vLLM's extension: sample only among these
    stream: bool = False
    include_usage: bool = False


@dataclass
class CompletionRequest:
    model: str
    prompts: list[str | list[int]]
    sampling: Sampling
    echo: bool = False


@dataclass
class ChatRequest:
    model: str
    messages: list[dict[str, str]]
    sampling: Sampling


def parse_json(raw: bytes) -> dict:
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ApiError(f"the request body is not valid JSON: {err}") from None
    if not isinstance(body, dict):
        raise ApiError(f"the request body must be a JSON object, got {type(body).__name__}")
    return body


def parse_completion(body: dict, *, default_max_tokens: int = 16) -> CompletionRequest:
    model = _string(body, "model", required=True)
    prompt = body.get("prompt")
    if prompt is None:
        raise ApiError("'prompt' is required", param="prompt")
    if isinstance(prompt, str):
        prompts: list = [prompt]
    elif isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt):
        prompts = [list(prompt)]  # one prompt as token ids
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        prompts = list(prompt)
    elif isinstance(prompt, list) and prompt and all(isinstance(p, list) and p and all(_is_int(t) for t in p) for p in prompt):
        prompts = [list(p) for p in prompt]
    else:
        raise ApiError("'prompt' must be a string, a list of strings, or token ids", param="prompt")
    if any(isinstance(p, str) and not p for p in prompts):
        raise ApiError("'prompt' is empty", param="prompt")
    logprobs = body.get("logprobs")
    if logprobs is not None and (not _is_int(logprobs) or not 0 <= logprobs <= MAX_TOP_LOGPROBS):
        raise ApiError(f"'logprobs' must be an integer between 0 and {MAX_TOP_LOGPROBS}", param="logprobs")
    echo = _bool(body, "echo", False)
    if echo:
        raise ApiError("'echo' is not supported", param="echo")
    _refuse(body, "suffix", "best_of")
    sampling = _sampling(body, max_tokens_keys=("max_tokens",), default_max_tokens=default_max_tokens)
    sampling.logprobs = logprobs
    allowed = body.get("allowed_token_ids")
    if allowed is not None:
        if not isinstance(allowed, list) or not allowed or not all(_is_int(t) and t >= 0 for t in allowed):
            raise ApiError("'allowed_token_ids' must be a non-empty list of token ids", param="allowed_token_ids")
        sampling.allowed_token_ids = allowed
    return CompletionRequest(model, prompts, sampling)


def parse_chat(body: dict, *, default_max_tokens: int | None = None) -> ChatRequest:
    model = _string(body, "model", required=True)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError("'messages' must be a non-empty list", param="messages")
    parsed = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ApiError(f"messages[{i}] must be an object", param=f"messages[{i}]")
        role = message.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            raise ApiError(
                f"messages[{i}].role must be system, user, assistant or tool, got {role!r}", param=f"messages[{i}].role"
            )
        content = message.get("content")
        if isinstance(content, list):  # content parts: text only
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
                raise ApiError(f"messages[{i}].content: only text parts are supported", param=f"messages[{i}].content")
            content = "".join(p["text"] for p in content)
        if content is None and role == "assistant":
            content = ""
        if not isinstance(content, str):
            raise ApiError(f"messages[{i}].content must be a string", param=f"messages[{i}].content")
        parsed.append({"role": "system" if role == "developer" else role, "content": content})
    sampling = _sampling(body, max_tokens_keys=("max_completion_tokens", "max_tokens"), default_max_tokens=default_max_tokens)
    if _bool(body, "logprobs", False):
        top = body.get("top_logprobs", 0)
        if top is None:
            top = 0
        if not _is_int(top) or not 0 <= top <= MAX_TOP_LOGPROBS:
            raise ApiError(f"'top_logprobs' must be an integer between 0 and {MAX_TOP_LOGPROBS}", param="top_logprobs")
        sampling.logprobs = top
    elif body.get("top_logprobs") is not None:
        raise ApiError("'top_logprobs' needs 'logprobs': true", param="top_logprobs")
    _refuse(body, "tools", "tool_choice", "functions", "response_format")
    return ChatRequest(model, parsed, sampling)


def _sampling(body: dict, *, max_tokens_keys: tuple[str, ...], default_max_tokens: int | None) -> Sampling:
    max_tokens = None
    for key in max_tokens_keys:
        value = body.get(key)
        if value is not None:
            if not _is_int(value) or value < 1:
                raise ApiError(f"'{key}' must be a positive integer, got {value!r}", param=key)
            max_tokens = value
            break
    temperature = _number(body, "temperature", 1.0, low=0.0, high=2.0)
    top_p = _number(body, "top_p", 1.0, low=0.0, high=1.0)
    if top_p == 0.0:
        raise ApiError("'top_p' must be greater than 0", param="top_p")
    seed = body.get("seed")
    if seed is not None and not _is_int(seed):
        raise ApiError(f"'seed' must be an integer, got {seed!r}", param="seed")
    n = body.get("n", 1)
    if n is None:
        n = 1
    if not _is_int(n) or not 1 <= n <= MAX_N:
        raise ApiError(f"'n' must be an integer between 1 and {MAX_N}", param="n")
    stop = body.get("stop")
    if stop is None:
        stops: list[str] = []
    elif isinstance(stop, str):
        stops = [stop]
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop) and len(stop) <= MAX_STOP_SEQUENCES:
        stops = list(stop)
    else:
        raise ApiError(f"'stop' must be a string or a list of at most {MAX_STOP_SEQUENCES} strings", param="stop")
    if any(not s for s in stops):
        raise ApiError("'stop' sequences must not be empty", param="stop")
    for key in ("presence_penalty", "frequency_penalty"):
        if _number(body, key, 0.0, low=-2.0, high=2.0) != 0.0:
            raise ApiError(f"'{key}' is not supported (only 0)", param=key)
    stream = _bool(body, "stream", False)
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not isinstance(options, dict):
            raise ApiError("'stream_options' must be an object", param="stream_options")
        include_usage = bool(options.get("include_usage", False))
    return Sampling(
        max_tokens=max_tokens or default_max_tokens or 0,
        temperature=temperature,
        top_p=top_p,
        seed=seed,
        stop=stops,
        n=n,
        stream=stream,
        include_usage=include_usage,
    )


def _string(body: dict, key: str, required: bool = False) -> str:
    value = body.get(key)
    if value is None and required:
        raise ApiError(f"'{key}' is required", param=key)
    if not isinstance(value, str):
        raise ApiError(f"'{key}' must be a string, got {type(value).__name__}", param=key)
    return value


def _number(body: dict, key: str, default: float, *, low: float, high: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ApiError(f"'{key}' must be a number between {low:g} and {high:g}, got {value!r}", param=key)
    return float(value)


def _bool(body: dict, key: str, default: bool) -> bool:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ApiError(f"'{key}' must be true or false, got {value!r}", param=key)
    return value


def _refuse(body: dict, *keys: str) -> None:
    for key in keys:
        if body.get(key) not in (None, [], ""):
            raise ApiError(f"'{key}' is not supported by this server", param=key)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
