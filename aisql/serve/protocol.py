"""The OpenAI request shapes `aisql serve` accepts, declared as pydantic models (as vLLM's
`entrypoints/openai/protocol.py` does), and the one place their validation errors become
OpenAI error bodies.

Validation is strict (no "yes" for true, no "10" for 10) and runs on the raw body with
pydantic's JSON parser, so malformed JSON, lone surrogates and absurd nesting are 400s too. A bad
request becomes an `ApiError` (`message`, `type`, `param`, `code`, a 4xx status); nothing reaches
the engine until a request is fully valid. Fields we do not act on (`user`, penalties of 0, ...)
are accepted and ignored, as OpenAI-compatible servers do; fields we cannot honour are refused
by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError, field_validator

MAX_N = 16
MAX_TOP_LOGPROBS = 20
MAX_STOP_SEQUENCES = 4
SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch's generators take

Number = Union[StrictInt, float]  # strict: JSON numbers only (the model is strict)
TokenIds = Annotated[list[Annotated[StrictInt, Field(ge=0)]], Field(min_length=1)]


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


# What each field must be, as error messages say it (one place for every message).
RULES = {
    "model": "a string",
    "prompt": "a string, a list of strings, or token ids",
    "max_tokens": "a positive integer",
    "max_completion_tokens": "a positive integer",
    "temperature": "a number between 0 and 2",
    "top_p": "a number greater than 0 and at most 1",
    "seed": f"an integer between {SEED_RANGE[0]} and {SEED_RANGE[1]}",
    "n": f"an integer between 1 and {MAX_N}",
    "stop": f"a string or a list of at most {MAX_STOP_SEQUENCES} non-empty strings",
    "logprobs": f"an integer between 0 and {MAX_TOP_LOGPROBS}",
    "top_logprobs": f"an integer between 0 and {MAX_TOP_LOGPROBS}",
    "stream": "true or false",
    "echo": "true or false",
    "stream_options": "an object",
    "presence_penalty": "0 (other values are not supported)",
    "frequency_penalty": "0 (other values are not supported)",
    "allowed_token_ids": "a non-empty list of token ids",
    "messages": "a non-empty list",
    "role": "system, user, assistant or tool",
    "content": "a string (or text parts)",
    "cache_salt": "a non-empty string of at most 256 characters",
}


class _Request(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    model: StrictStr
    max_tokens: Annotated[StrictInt, Field(ge=1)] | None = None
    temperature: Annotated[Number, Field(ge=0.0, le=2.0)] = 1.0
    top_p: Annotated[Number, Field(gt=0.0, le=1.0)] = 1.0
    seed: Annotated[StrictInt, Field(ge=SEED_RANGE[0], le=SEED_RANGE[1])] | None = None
    n: Annotated[StrictInt, Field(ge=1, le=MAX_N)] | None = 1
    stop: StrictStr | Annotated[list[Annotated[StrictStr, Field(min_length=1)]], Field(max_length=MAX_STOP_SEQUENCES)] | None = None
    stream: StrictBool | None = False
    stream_options: dict[str, Any] | None = None
    presence_penalty: Annotated[Number, Field(ge=0, le=0)] | None = 0
    frequency_penalty: Annotated[Number, Field(ge=0, le=0)] | None = 0
    cache_salt: Annotated[StrictStr, Field(min_length=1, max_length=256)] | None = None  # vLLM's extension

    @field_validator("stop")
    @classmethod
    def _stop_not_empty(cls, value):
        if value == "":
            raise ValueError("empty stop sequence")
        return value


class CompletionBody(_Request):
    prompt: StrictStr | TokenIds | Annotated[list[StrictStr], Field(min_length=1)] | Annotated[list[TokenIds], Field(min_length=1)]
    logprobs: Annotated[StrictInt, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    echo: StrictBool | None = False
    allowed_token_ids: TokenIds | None = None
    suffix: None = None
    best_of: None = None


class TextPart(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")
    type: Literal["text"]
    text: StrictStr


class Message(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: StrictStr | list[TextPart] | None = None


class ChatBody(_Request):
    messages: Annotated[list[Message], Field(min_length=1)]
    max_completion_tokens: Annotated[StrictInt, Field(ge=1)] | None = None
    logprobs: StrictBool | None = False
    top_logprobs: Annotated[StrictInt, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    tools: None = None
    tool_choice: None = None
    functions: None = None
    response_format: None = None


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
    cache_salt: str | None = None
    user: str | None = None  # OpenAI's end-user id: a conversation to keep on one replica


@dataclass
class CompletionRequest:
    model: str
    prompts: list[str | list[int]]
    sampling: Sampling


@dataclass
class ChatRequest:
    model: str
    messages: list[dict[str, str]]
    sampling: Sampling


def parse_completion(raw: bytes, *, default_max_tokens: int = 16) -> CompletionRequest:
    body = _validate(CompletionBody, raw)
    if body.echo:
        raise ApiError("'echo' is not supported", param="echo")
    prompt = body.prompt
    if isinstance(prompt, str):
        prompts: list = [prompt]
    elif prompt and isinstance(prompt[0], int):
        prompts = [list(prompt)]  # one prompt as token ids
    else:
        prompts = [p if isinstance(p, str) else list(p) for p in prompt]
    if any(isinstance(p, str) and not p for p in prompts):
        raise ApiError("'prompt' is empty", param="prompt")
    sampling = _sampling(body, body.max_tokens or default_max_tokens)
    sampling.logprobs = body.logprobs
    sampling.allowed_token_ids = body.allowed_token_ids
    return CompletionRequest(body.model, prompts, sampling)


def parse_chat(raw: bytes, *, default_max_tokens: int | None = None) -> ChatRequest:
    body = _validate(ChatBody, raw)
    messages = []
    for i, message in enumerate(body.messages):
        extra = message.model_extra or {}
        if message.role == "tool" or extra.get("tool_calls") or extra.get("function_call") or message.role == "function":
            # the server offers no tools ('tools' is refused): a tool call or result in the
            # history would be dropped silently and the answer given as if it never happened
            what = "a tool result (role 'tool')" if message.role == "tool" else "tool calls"
            raise ApiError(f"messages[{i}] holds {what}; this server runs no tools", param=f"messages[{i}]")
        content = message.content
        if isinstance(content, list):
            content = "".join(part.text for part in content)
        if content is None:
            if message.role != "assistant":
                raise ApiError(f"messages[{i}].content must be {RULES['content']}", param=f"messages[{i}].content")
            content = ""
        messages.append({"role": "system" if message.role == "developer" else message.role, "content": content})
    sampling = _sampling(body, body.max_completion_tokens or body.max_tokens or default_max_tokens or 0)
    if body.logprobs:
        sampling.logprobs = body.top_logprobs or 0
    elif body.top_logprobs is not None:
        raise ApiError("'top_logprobs' needs 'logprobs': true", param="top_logprobs")
    return ChatRequest(body.model, messages, sampling)


def _sampling(body: _Request, max_tokens: int) -> Sampling:
    stop = body.stop
    options = body.stream_options or {}
    return Sampling(
        max_tokens=max_tokens,
        temperature=float(body.temperature),
        top_p=float(body.top_p),
        seed=body.seed,
        stop=[stop] if isinstance(stop, str) else list(stop or []),
        n=body.n or 1,
        stream=bool(body.stream),
        include_usage=bool(options.get("include_usage", False)),
        cache_salt=body.cache_salt,
        user=_user(body),
    )


def _user(body: _Request) -> str | None:
    """OpenAI's `user` (an end-user id; accepted, not validated by OpenAI-compatible servers):
    a string, or nothing."""
    user = (body.model_extra or {}).get("user")
    return user if isinstance(user, str) and user else None


def _validate(model: type[BaseModel], raw: bytes):
    try:
        return model.model_validate_json(raw)
    except ValidationError as err:
        raise _api_error(err) from None


def _api_error(err: ValidationError) -> ApiError:
    """The first problem of a request, as OpenAI says it: what is wrong with which field."""
    problem = err.errors(include_url=False)[0]
    kind, loc, given = problem["type"], problem["loc"], problem.get("input")
    if kind == "json_invalid":
        return ApiError(f"the request body is not valid JSON: {problem['msg']}")
    if kind in ("model_type", "model_attributes_type") and not loc:
        return ApiError(f"the request body must be a JSON object, got {_json_type(given)}")
    param = _param(loc)
    name = next((str(part) for part in reversed(loc) if isinstance(part, str) and part in RULES), str(loc[0]) if loc else "")
    if kind == "missing":
        return ApiError(f"'{param}' is required", param=param)
    if name in ("suffix", "best_of", "tools", "tool_choice", "functions", "response_format"):
        return ApiError(f"'{name}' is not supported by this server", param=name)
    rule = RULES.get(name)
    if rule is None:
        return ApiError(f"'{param}': {problem['msg']}", param=param)
    shown = param if "[" in param or "." in param else f"'{param}'"
    return ApiError(f"{shown} must be {rule}, got {_short(given)}", param=param)


def _param(loc: tuple) -> str:
    """('messages', 0, 'role') -> 'messages[0].role'; union branch names are dropped."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in RULES or part in CompletionBody.model_fields or part in ChatBody.model_fields or part in ("role", "content", "text", "type"):
            out += ("." if out else "") + part
        if out and part == loc[0] and part in ("prompt", "stop", "allowed_token_ids"):
            break  # the field itself, not the union branch pydantic tried
    return out or "body"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _json_type(value: Any) -> str:
    return {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}.get(type(value), "null")
