"""`aisql serve`: an OpenAI-compatible HTTP API (Starlette, run by uvicorn) over the serving engine.

    /v1/models  /v1/completions  /v1/chat/completions  /health  /metrics

Each choice of a request is one engine request; its tokens come back through a thread-safe sink
into an asyncio queue, are decoded incrementally (aisql.serve.text) and sent as they come
(`stream: true`, server-sent events in OpenAI's chunk format) or gathered into one response. A
client that disconnects cancels its requests, which frees their KV at the engine's next pass.
Bad requests get OpenAI-style JSON errors with 4xx codes and touch nothing else.

Limits are enforced at the edge, before any work: the body size (read incrementally, 413), JSON
bodies only (415), prompts per request and choices in all, a prompt's length against the
context (by characters first, so a huge text is refused without tokenizing it). With
`--api-key`, requests need `Authorization: Bearer <key>` (401); /metrics then needs the
operator's `--metrics-key` (a single tenant's own key also works: no one else's reuse to see). The prefix cache is partitioned
per API key when there are several keys (or on request), and by a request's `cache_salt` (vLLM's
extension): `usage.prompt_tokens_details.cached_tokens` tells a client how much of its prompt was
cached, which within one partition reveals whether another client sent the same beginning.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from aisql.engine.backends.hf import HFEngine
from aisql.engine.continuous import FinishEvent, RequestHandle, ServeRequest, ServingEngine, TokenEvent
from aisql.serve.metrics import ServerMetrics
from aisql.serve.protocol import SEED_RANGE, ApiError, Sampling, parse_chat, parse_completion
from aisql.serve.text import TextStream

DEFAULT_CHAT_MAX_TOKENS = 4096


@dataclass(frozen=True)
class RequestLimits:
    max_body_bytes: int = 4 << 20
    drain_bytes: int = 64 << 20  # of a refused body read and dropped so the client reads its 413 (not a reset)
    max_prompts: int = 64  # prompts in one /v1/completions request
    max_choices: int = 128  # prompts x n
DISCONNECT_POLL_S = 0.5


@dataclass
class _Choice:
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
class _Delta:
    choice: _Choice
    text: str
    token_ids: list[int]
    logprobs: list[float] | None
    top_logprobs: list[dict[int, float]] | None
    finish_reason: str | None = None


class OpenAIServer:
    def __init__(
        self,
        engine: HFEngine,
        model_name: str,
        *,
        max_running: int = 64,
        prefill_chunk: int = 2048,
        max_kv_tokens: int | None = None,
        api_keys: Sequence[str] = (),
        cache_isolation: str | None = None,
        limits: RequestLimits = RequestLimits(),
        metrics_keys: Sequence[str] = (),
        replicas=None,
    ) -> None:
        """`api_keys`: accepted Bearer tokens (none: no authentication). `cache_isolation`:
        "per-key" (each key its own prefix cache; the default with several keys) or "shared".
        `metrics_keys`: the operator's tokens for /metrics (see `_authorize_metrics`).
        `replicas`: a started aisql.serve.replicas.ReplicaPool to route requests to; `engine` is
        then only the model's front (tokenizer, info, format), and the serving options are the
        replicas'."""
        self.engine = engine
        self.model_name = model_name
        self.tokenizer = engine.tokenizer
        self.limits = limits
        self.api_keys = {key: hashlib.sha256(key.encode()).hexdigest()[:16] for key in api_keys}
        self.metrics_keys = frozenset(metrics_keys)
        isolation = cache_isolation or ("per-key" if len(self.api_keys) > 1 else "shared")
        if isolation not in ("per-key", "shared"):
            raise ValueError(f"unknown cache isolation {isolation!r}: use per-key or shared")
        self.cache_isolation = isolation
        self._max_prompt_chars = engine.info.max_context * max((len(t) for t in self.tokenizer.get_vocab()), default=1)
        self.replicas = replicas
        if replicas is not None:
            self.serving = replicas
        else:
            self.serving = ServingEngine(engine, max_running=max_running, prefill_chunk=prefill_chunk, max_kv_tokens=max_kv_tokens)
        self.metrics = ServerMetrics(self.serving, model_name)
        self.created = int(time.time())
        routes = [
            Route("/health", self._counted("health", self.health), methods=["GET"]),
            Route("/metrics", self._counted("metrics", self.prometheus, metrics=True), methods=["GET"]),
            Route("/v1/models", self._counted("models", self.models, authenticated=True), methods=["GET"]),
            Route("/v1/completions", self._counted("completions", self.completions, authenticated=True), methods=["POST"]),
            Route("/v1/chat/completions", self._counted("chat", self.chat, authenticated=True), methods=["POST"]),
        ]
        self.app = Starlette(
            routes=routes,
            exception_handlers={HTTPException: self._http_error, Exception: self._internal_error},
            lifespan=self._lifespan,
        )

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette):
        if self.replicas is not None:
            self.replicas.start_watching()  # deaths are learnt in this loop
        yield
        self.serving.close()  # the engine thread (or the replicas) end with the server

    # ---- small endpoints -------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        if self.replicas is None:
            return JSONResponse({"status": "ok", "model": self.model_name})
        ready = self.replicas.ready
        body = {"status": "ok" if ready else "unavailable", "model": self.model_name, "replicas": {"ready": ready, "of": self.replicas.count}}
        return JSONResponse(body, status_code=200 if ready else 503)

    async def prometheus(self, request: Request) -> Response:
        if self.replicas is not None:
            await self.replicas.refresh()
        return Response(self.metrics.render(), media_type="text/plain; version=0.0.4")

    async def models(self, request: Request) -> Response:
        card = {
            "id": self.model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "aisql",
            "max_model_len": self.engine.info.max_context,
        }
        return JSONResponse({"object": "list", "data": [card]})

    # ---- generation ------------------------------------------------------------------------
    async def completions(self, request: Request) -> Response:
        parsed = parse_completion(await self._body(request))
        self._check_model(parsed.model)
        self._check_counts(len(parsed.prompts), parsed.sampling.n)
        prompts = [self._encode_text(p) if isinstance(p, str) else self._check_ids(p) for p in parsed.prompts]
        if parsed.sampling.allowed_token_ids is not None:
            self._check_ids(parsed.sampling.allowed_token_ids, "allowed_token_ids")
        choices = self._choices(prompts, parsed.sampling, salt := self._salt(request, parsed.sampling), self._session(request, parsed.sampling, salt))
        kind = "text_completion"
        response_id = f"cmpl-{uuid.uuid4().hex}"

        def chunk(delta: _Delta) -> dict:
            return {
                "index": delta.choice.index,
                "text": delta.text,
                "logprobs": self._completion_logprobs(delta.choice, delta.token_ids, delta.logprobs, delta.top_logprobs)
                if delta.logprobs is not None
                else None,
                "finish_reason": delta.finish_reason,
            }

        if parsed.sampling.stream:
            return self._stream(request, choices, parsed.sampling, response_id, kind, chunk, first=None)
        await self._gather(request, choices)
        body = {
            "id": response_id,
            "object": kind,
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [
                {
                    "index": c.index,
                    "text": c.text.sent,
                    "logprobs": self._completion_logprobs(c, c.token_ids, c.logprobs, c.top_logprobs)
                    if parsed.sampling.logprobs is not None
                    else None,
                    "finish_reason": c.finish_reason,
                }
                for c in choices
            ],
            "usage": _usage(choices, parsed.sampling.n),
        }
        return JSONResponse(body)

    async def chat(self, request: Request) -> Response:
        parsed = parse_chat(await self._body(request))
        self._check_model(parsed.model)
        self._check_counts(1, parsed.sampling.n)
        prompt = self._encode_chat(parsed.messages)
        choices = self._choices([prompt], parsed.sampling, salt := self._salt(request, parsed.sampling), self._session(request, parsed.sampling, salt))
        kind = "chat.completion.chunk"
        response_id = f"chatcmpl-{uuid.uuid4().hex}"

        def chunk(delta: _Delta) -> dict:
            content = {"content": delta.text} if delta.text or delta.finish_reason is None else {}
            return {
                "index": delta.choice.index,
                "delta": content,
                "logprobs": {"content": self._chat_logprobs(delta.token_ids, delta.logprobs, delta.top_logprobs)}
                if delta.logprobs is not None
                else None,
                "finish_reason": delta.finish_reason,
            }

        def first(choice: _Choice) -> dict:
            return {"index": choice.index, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}

        if parsed.sampling.stream:
            return self._stream(request, choices, parsed.sampling, response_id, kind, chunk, first=first)
        await self._gather(request, choices)
        body = {
            "id": response_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [
                {
                    "index": c.index,
                    "message": {"role": "assistant", "content": c.text.sent},
                    "logprobs": {"content": self._chat_logprobs(c.token_ids, c.logprobs, c.top_logprobs)}
                    if parsed.sampling.logprobs is not None
                    else None,
                    "finish_reason": c.finish_reason,
                }
                for c in choices
            ],
            "usage": _usage(choices, 1),
        }
        return JSONResponse(body)

    # ---- requests to choices ---------------------------------------------------------------
    def _choices(self, prompts: list[list[int]], sampling: Sampling, salt: str | None, session: str | None = None) -> list[_Choice]:
        if self.replicas is not None and not self.replicas.ready:
            raise ApiError("no replica is ready (restarting); retry shortly", status=503, kind="server_error", code="unavailable")
        context = self.engine.info.max_context
        choices = []
        for prompt in prompts:
            room = context - len(prompt)
            max_tokens = sampling.max_tokens or min(room, DEFAULT_CHAT_MAX_TOKENS)
            if room < 1 or max_tokens > room:
                raise ApiError(
                    f"This model's maximum context length is {context} tokens. However, you requested "
                    f"{len(prompt) + max_tokens} tokens ({len(prompt)} in the prompt, {max_tokens} for the completion).",
                    param="messages" if sampling.max_tokens == 0 else "max_tokens",
                    code="context_length_exceeded",
                )
            for _ in range(sampling.n):
                request = ServeRequest(
                    tuple(prompt),
                    max_tokens,
                    temperature=sampling.temperature,
                    top_p=sampling.top_p,
                    seed=None if sampling.seed is None else _choice_seed(sampling.seed, len(choices)),
                    logprobs=sampling.logprobs,
                    allowed_token_ids=tuple(sampling.allowed_token_ids) if sampling.allowed_token_ids else None,
                    cache_salt=salt,
                )
                choices.append(_Choice(len(choices), len(prompt), TextStream(self.tokenizer, sampling.stop), request, session=session))
        return choices

    async def _events(self, request: Request, choices: list[_Choice]) -> AsyncIterator[_Delta]:
        """Submit every choice and yield text deltas as tokens arrive; cancel whatever is still
        running if the consumer stops (client gone, error)."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        for choice in choices:
            sink = _sink(loop, queue, choice.index)
            choice.handle = self.serving.submit(choice.request, sink, session=choice.session)
        pending = len(choices)
        try:
            while pending:
                try:
                    index, event = await asyncio.wait_for(queue.get(), DISCONNECT_POLL_S)
                except asyncio.TimeoutError:
                    if await request.is_disconnected():
                        return
                    continue
                choice = choices[index]
                if choice.finish_reason is not None:
                    continue  # ended by a stop sequence; the engine's last word does not matter
                if isinstance(event, TokenEvent):
                    choice.completion_tokens += len(event.token_ids)
                    choice.token_ids.extend(event.token_ids)
                    if event.logprobs is not None:
                        choice.logprobs.extend(event.logprobs)
                        choice.top_logprobs.extend(event.top_logprobs or [{}] * len(event.logprobs))
                    text = choice.text.add(event.token_ids)
                    if choice.text.stopped:
                        choice.finish_reason = "stop"
                        choice.handle.cancel()
                        pending -= 1
                        self.metrics.observe(choice.handle)
                    yield _Delta(choice, text, event.token_ids, event.logprobs, event.top_logprobs, choice.finish_reason)
                    continue
                assert isinstance(event, FinishEvent)
                if event.finish_reason == "error":
                    raise RuntimeError(f"the engine failed: {event.error}")
                choice.finish_reason = event.finish_reason
                choice.cached_tokens = event.cached_tokens
                pending -= 1
                self.metrics.observe(choice.handle)
                yield _Delta(
                    choice, choice.text.flush(), [], None if choice.request.logprobs is None else [], None, choice.finish_reason
                )
        finally:
            for choice in choices:
                if choice.handle is not None and choice.finish_reason is None:
                    choice.handle.cancel()

    async def _gather(self, request: Request, choices: list[_Choice]) -> None:
        try:
            async for _ in self._events(request, choices):
                pass
        except RuntimeError as err:  # the engine (or the replica) failed this request: say so, not "internal error"
            raise ApiError(str(err), status=500, kind="server_error") from None

    def _stream(
        self,
        request: Request,
        choices: list[_Choice],
        sampling: Sampling,
        response_id: str,
        kind: str,
        chunk: Callable[[_Delta], dict],
        first: Callable[[_Choice], dict] | None,
    ) -> StreamingResponse:
        created = int(time.time())

        def envelope(items: list[dict], usage: dict | None = None) -> str:
            body = {"id": response_id, "object": kind, "created": created, "model": self.model_name, "choices": items}
            if sampling.include_usage:
                body["usage"] = usage
            return f"data: {json.dumps(body)}\n\n"

        async def events() -> AsyncIterator[str]:
            if first is not None:
                for choice in choices:
                    yield envelope([first(choice)])
            try:
                async for delta in self._events(request, choices):
                    if delta.text or delta.finish_reason is not None or delta.logprobs:
                        yield envelope([chunk(delta)])
            except RuntimeError as err:
                yield f"data: {json.dumps(ApiError(str(err), status=500, kind='server_error').body())}\n\n"
            if sampling.include_usage:
                yield envelope([], _usage(choices, sampling.n if kind == "text_completion" else 1))
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    # ---- the edge: what a request may be --------------------------------------------------
    async def _body(self, request: Request) -> bytes:
        """The body, read at most up to the limit (a client lying about or omitting
        Content-Length cannot make the server buffer more)."""
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            raise ApiError("the request body must be JSON (Content-Type: application/json)", status=415)
        limit = self.limits.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._drain(request, int(declared))
            raise ApiError(f"the request body is over the limit of {limit:,} bytes", status=413)
        chunks, size = [], 0
        stream = request.stream()
        async for chunk in stream:
            size += len(chunk)
            if size > limit:
                await self._drain(request, None, stream)
                raise ApiError(f"the request body is over the limit of {limit:,} bytes", status=413)
            chunks.append(chunk)
        return b"".join(chunks)

    async def _drain(self, request: Request, declared: int | None, stream=None) -> None:
        """Read and drop the rest of a refused body, up to `limits.drain_bytes`, before the 413
        goes out: a server that answers and closes while the client is still sending resets the
        connection, and the client sees a broken pipe instead of the 413. A body declared (or
        found) bigger than the bound is not read: the connection closes after the answer."""
        bound = self.limits.drain_bytes
        if declared is not None and declared > bound:
            return
        drained = 0
        async for chunk in stream if stream is not None else request.stream():
            drained += len(chunk)
            if drained > bound:
                return

    def _check_counts(self, prompts: int, n: int) -> None:
        if prompts > self.limits.max_prompts:
            raise ApiError(f"'prompt' holds {prompts} prompts; at most {self.limits.max_prompts} per request", param="prompt")
        if prompts * n > self.limits.max_choices:
            raise ApiError(
                f"{prompts} prompts x n={n} is {prompts * n} choices; at most {self.limits.max_choices} per request", param="n"
            )

    def _authorize(self, request: Request) -> str | None:
        """The caller's API key (None without authentication); 401 for a missing or wrong one."""
        if not self.api_keys:
            return None
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or token.strip() not in self.api_keys:
            raise ApiError("invalid or missing API key (Authorization: Bearer <key>)", status=401, code="invalid_api_key")
        return token.strip()

    def _authorize_metrics(self, request: Request) -> None:
        """/metrics counts the whole server's work: its prefix-cache hits tell when *another*
        tenant repeats a prompt. Open on a server without keys (one user); with --metrics-key,
        only that key; else only a single tenant's own key (no one else to learn about) — with
        several API keys and no metrics key, closed (403)."""
        if not self.api_keys and not self.metrics_keys:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        token = token.strip() if scheme.lower() == "bearer" else ""
        if token in self.metrics_keys or (not self.metrics_keys and len(self.api_keys) == 1 and token in self.api_keys):
            return
        if not token or (token not in self.api_keys and token not in self.metrics_keys):
            raise ApiError("invalid or missing metrics key (Authorization: Bearer <key>)", status=401, code="invalid_api_key")
        raise ApiError(
            "/metrics counts every tenant's work; it needs the operator's --metrics-key, not a tenant's API key",
            status=403,
            code="forbidden",
        )

    def _salt(self, request: Request, sampling: Sampling) -> str | None:
        """The prefix-cache partition of a request: its API key's (per-key isolation) and its cache_salt."""
        parts = []
        key = request.scope.get("aisql_api_key")
        if key is not None and self.cache_isolation == "per-key":
            parts.append(self.api_keys[key])
        if sampling.cache_salt:
            parts.append(hashlib.sha256(sampling.cache_salt.encode()).hexdigest()[:16])
        return ":".join(parts) or None

    def _session(self, request: Request, sampling: Sampling, salt: str | None) -> str | None:
        """The conversation a request belongs to, where the client names one (the X-Session-Id
        header, else OpenAI's `user`), within the request's cache partition."""
        if self.replicas is None:
            return None
        named = request.headers.get("x-session-id") or sampling.user
        if not named:
            return None
        return f"{salt or ''}|{named[:256]}"

    # ---- encoding and logprobs -------------------------------------------------------------
    def _encode_text(self, text: str) -> list[int]:
        if len(text) > self._max_prompt_chars:  # more characters than the context could hold as tokens
            self._context_error(len(text) // max(1, self._max_prompt_chars // self.engine.info.max_context), 0, "prompt")
        return list(self.tokenizer(text)["input_ids"])

    def _context_error(self, prompt_tokens: int, max_tokens: int, param: str):
        context = self.engine.info.max_context
        raise ApiError(
            f"This model's maximum context length is {context} tokens. However, you requested "
            f"at least {prompt_tokens + max_tokens} tokens.",
            param=param,
            code="context_length_exceeded",
        )

    def _check_ids(self, ids: list[int], param: str = "prompt") -> list[int]:
        vocab = len(self.tokenizer)
        bad = next((t for t in ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise ApiError(f"'{param}' holds token id {bad}, outside the vocabulary (0..{vocab - 1})", param=param)
        return ids

    def _encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
        total = sum(len(m["content"]) for m in messages)
        if total > self._max_prompt_chars:
            self._context_error(total // max(1, self._max_prompt_chars // self.engine.info.max_context), 0, "messages")
        fmt = self.engine.format
        if not fmt.uses_chat_template:
            text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"
            return self._encode_text(text)
        if any(fmt.spells_special_token(m["content"]) for m in messages):
            return self._encode_chat_as_data(messages)
        return list(self.tokenizer(self._render_chat(messages), add_special_tokens=False)["input_ids"])

    def _render_chat(self, messages: list[dict[str, str]]) -> str:
        try:
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except Exception as err:  # noqa: BLE001 - the template's own complaint, e.g. roles out of order
            raise ApiError(f"the model's chat template refused these messages: {err}", param="messages") from None

    def _encode_chat_as_data(self, messages: list[dict[str, str]]) -> list[int]:
        """Messages that spell special tokens: the template renders markers in their place, and
        the contents are encoded as plain characters between the framing's tokens."""
        markers = [f"\u0000AISQL_MESSAGE_{i}\u0000" for i in range(len(messages))]
        rendered = self._render_chat([{**m, "content": marker} for m, marker in zip(messages, markers)])
        pieces: list[tuple[str, bool]] = []
        rest = rendered
        for message, marker in zip(messages, markers):
            before, found, rest = rest.partition(marker)
            if not found:
                raise ApiError(
                    "a message spells one of the model's special tokens and this chat template does not keep message "
                    "text verbatim, so it cannot be sent as plain text",
                    param="messages",
                )
            pieces += [(before, False), (message["content"], True)]
        pieces.append((rest, False))
        return list(self.engine.format.encode_pieces(pieces, add_special_tokens=False))

    def _completion_logprobs(self, choice: _Choice, ids, logprobs, tops) -> dict:
        tokens = [choice.text.token_text(t) for t in ids]
        return {
            "tokens": tokens,
            "token_logprobs": list(logprobs or []),
            "top_logprobs": [{choice.text.token_text(t): lp for t, lp in top.items()} for top in (tops or [])],
            "text_offset": _offsets(tokens, len(choice.text.sent) - sum(len(t) for t in tokens)),
        }

    def _chat_logprobs(self, ids, logprobs, tops) -> list[dict]:
        out = []
        for token, logprob, top in zip(ids, logprobs or [], tops or [{}] * len(ids)):
            text = self.tokenizer.decode([token])
            out.append(
                {
                    "token": text,
                    "logprob": logprob,
                    "bytes": list(text.encode()),
                    "top_logprobs": [
                        {"token": self.tokenizer.decode([t]), "logprob": lp, "bytes": list(self.tokenizer.decode([t]).encode())}
                        for t, lp in top.items()
                    ],
                }
            )
        return out

    def _check_model(self, model: str) -> None:
        if model != self.model_name:
            raise ApiError(
                f"The model '{model}' does not exist; this server serves '{self.model_name}'",
                param="model",
                status=404,
                code="model_not_found",
            )

    # ---- errors ----------------------------------------------------------------------------
    def _counted(self, endpoint: str, handler, *, authenticated: bool = False, metrics: bool = False):
        async def wrapped(request: Request) -> Response:
            try:
                if authenticated:
                    request.scope["aisql_api_key"] = self._authorize(request)
                if metrics:
                    self._authorize_metrics(request)
                response = await handler(request)
            except ApiError as err:
                response = JSONResponse(err.body(), status_code=err.status)
            self.metrics.requests.labels(endpoint, str(response.status_code)).inc()
            return response

        return wrapped

    async def _http_error(self, request: Request, exc: HTTPException) -> Response:
        error = ApiError(f"{exc.detail}: {request.method} {request.url.path}", status=exc.status_code)
        return JSONResponse(error.body(), status_code=exc.status_code)

    async def _internal_error(self, request: Request, exc: Exception) -> Response:
        error = ApiError(f"internal error: {type(exc).__name__}: {exc}", status=500, kind="server_error")
        return JSONResponse(error.body(), status_code=500)


def _choice_seed(seed: int, index: int) -> int:
    """The seed of choice `index` of a request seeded `seed`, kept in the range generators take."""
    return seed + index if seed + index <= SEED_RANGE[1] else (seed + index) % (SEED_RANGE[1] + 1)


def _sink(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue, index: int):
    def sink(event) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, (index, event))

    return sink


def _usage(choices: list[_Choice], n: int) -> dict:
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
