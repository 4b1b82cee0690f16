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
import json
import time
import uuid
from collections.abc import AsyncIterator, Sequence

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from aisql.engine.backends.hf import HFEngine
from aisql.engine.continuous import FinishEvent, ServeRequest, ServingEngine, TokenEvent
from aisql.engine.options import DEFAULT_PASS_TOKENS
from aisql.serve.guards import EdgeGuards, RequestLimits
from aisql.serve.metrics import ServerMetrics
from aisql.serve.openai_format import ChatFormat, Choice, CompletionFormat, Delta, ResponseFormat, choice_seed, usage
from aisql.serve.prompt_encoding import PromptEncoder
from aisql.serve.protocol import ApiError, Sampling, parse_chat, parse_completion
from aisql.serve.text import TextStream

DEFAULT_CHAT_MAX_TOKENS = 4096


DISCONNECT_POLL_S = 0.5
DISCONNECT_POLL_S = 0.5


class OpenAIServer:
    def __init__(
        self,
        engine: HFEngine,
        model_name: str,
        *,
        max_running: int = 64,
        pass_tokens: int = DEFAULT_PASS_TOKENS,
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
        self.guards = EdgeGuards(limits, api_keys, metrics_keys, cache_isolation, sessions=replicas is not None)
        self.cache_isolation = self.guards.cache_isolation
        self.encoder = PromptEncoder(engine.tokenizer, engine.format, engine.info.max_context)
        self.replicas = replicas
        if replicas is not None:
            self.serving = replicas
        else:
            self.serving = ServingEngine(engine, max_running=max_running, pass_tokens=pass_tokens, max_kv_tokens=max_kv_tokens)
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
        parsed = parse_completion(await self.guards.body(request))
        self._check_model(parsed.model)
        self.guards.check_counts(len(parsed.prompts), parsed.sampling.n)
        prompts = [self.encoder.encode_text(p) if isinstance(p, str) else self.encoder.check_ids(p) for p in parsed.prompts]
        if parsed.sampling.allowed_token_ids is not None:
            self.encoder.check_ids(parsed.sampling.allowed_token_ids, "allowed_token_ids")
        return await self._respond(request, prompts, parsed.sampling, CompletionFormat())

    async def chat(self, request: Request) -> Response:
        parsed = parse_chat(await self.guards.body(request))
        self._check_model(parsed.model)
        self.guards.check_counts(1, parsed.sampling.n)
        prompt = self.encoder.encode_chat(parsed.messages)
        return await self._respond(request, [prompt], parsed.sampling, ChatFormat(self.tokenizer))

    async def _respond(self, request: Request, prompts: list[list[int]], sampling: Sampling, shape: "ResponseFormat") -> Response:
        """The request's choices run, streamed as they come or gathered into one response."""
        salt = self.guards.salt(request, sampling)
        choices = self._choices(prompts, sampling, salt, self.guards.session(request, sampling, salt))
        response_id = f"{shape.id_prefix}-{uuid.uuid4().hex}"
        if sampling.stream:
            return self._stream(request, choices, sampling, response_id, shape)
        await self._gather(request, choices)
        return JSONResponse(shape.response(response_id, self.model_name, choices, sampling))

    # ---- requests to choices ---------------------------------------------------------------
    def _choices(self, prompts: list[list[int]], sampling: Sampling, salt: str | None, session: str | None = None) -> list[Choice]:
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
                    seed=None if sampling.seed is None else choice_seed(sampling.seed, len(choices)),
                    logprobs=sampling.logprobs,
                    allowed_token_ids=tuple(sampling.allowed_token_ids) if sampling.allowed_token_ids else None,
                    cache_salt=salt,
                )
                choices.append(Choice(len(choices), len(prompt), TextStream(self.tokenizer, sampling.stop), request, session=session))
        return choices

    async def _events(self, request: Request, choices: list[Choice]) -> AsyncIterator[Delta]:
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
                    yield Delta(choice, text, event.token_ids, event.logprobs, event.top_logprobs, choice.finish_reason)
                    continue
                assert isinstance(event, FinishEvent)
                if event.finish_reason == "error":
                    raise RuntimeError(f"the engine failed: {event.error}")
                choice.finish_reason = event.finish_reason
                choice.cached_tokens = event.cached_tokens
                pending -= 1
                self.metrics.observe(choice.handle)
                yield Delta(
                    choice, choice.text.flush(), [], None if choice.request.logprobs is None else [], None, choice.finish_reason
                )
        finally:
            for choice in choices:
                if choice.handle is not None and choice.finish_reason is None:
                    choice.handle.cancel()

    async def _gather(self, request: Request, choices: list[Choice]) -> None:
        try:
            async for _ in self._events(request, choices):
                pass
        except RuntimeError as err:  # the engine (or the replica) failed this request: say so, not "internal error"
            raise ApiError(str(err), status=500, kind="server_error") from None

    def _stream(
        self,
        request: Request,
        choices: list[Choice],
        sampling: Sampling,
        response_id: str,
        shape: "ResponseFormat",
    ) -> StreamingResponse:
        created, kind = int(time.time()), shape.chunk_object

        def envelope(items: list[dict], usage: dict | None = None) -> str:
            body = {"id": response_id, "object": kind, "created": created, "model": self.model_name, "choices": items}
            if sampling.include_usage:
                body["usage"] = usage
            return f"data: {json.dumps(body)}\n\n"

        async def events() -> AsyncIterator[str]:
            for choice in choices:
                opening = shape.first(choice)
                if opening is not None:
                    yield envelope([opening])
            try:
                async for delta in self._events(request, choices):
                    if delta.text or delta.finish_reason is not None or delta.logprobs:
                        yield envelope([shape.chunk(delta)])
            except RuntimeError as err:
                yield f"data: {json.dumps(ApiError(str(err), status=500, kind='server_error').body())}\n\n"
            if sampling.include_usage:
                yield envelope([], usage(choices, shape.usage_n(sampling)))
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

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
                    request.scope["aisql_api_key"] = self.guards.authorize(request)
                if metrics:
                    self.guards.authorize_metrics(request)
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


def _sink(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue, index: int):
    def sink(event) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, (index, event))

    return sink
