"""The edge of `aisql serve`: what a request may be, checked before any work — the body (JSON
only, read incrementally up to its limit, a refused body drained so the client reads its 413),
prompts and choices per request, API keys and the /metrics key, and the request's prefix-cache
partition (per API key, by `cache_salt`) and named conversation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from starlette.requests import Request

from aisql.serve.choices import CACHE_ISOLATIONS
from aisql.serve.protocol import ApiError, Sampling


@dataclass(frozen=True)
class RequestLimits:
    max_body_bytes: int = 4 << 20
    drain_bytes: int = 64 << 20  # of a refused body read and dropped so the client reads its 413 (not a reset)
    prompts_per_request: int = 64  # prompts in one /v1/completions request
    max_choices: int = 128  # prompts x n


class EdgeGuards:
    """One server's limits, keys and cache partitions."""

    def __init__(
        self, limits: RequestLimits, api_keys: Sequence[str], metrics_keys: Sequence[str], cache_isolation: str | None, sessions: bool
    ) -> None:
        """`cache_isolation`: "per-key" (each key its own prefix cache; the default with several
        keys) or "shared". `sessions`: requests may name a conversation (replicas route by it)."""
        self.limits = limits
        self.api_keys = {key: hashlib.sha256(key.encode()).hexdigest()[:16] for key in api_keys}
        self.metrics_keys = frozenset(metrics_keys)
        isolation = cache_isolation or ("per-key" if len(self.api_keys) > 1 else "shared")
        if isolation not in CACHE_ISOLATIONS:
            raise ValueError(f"unknown cache isolation {isolation!r}: use {' or '.join(CACHE_ISOLATIONS)}")
        self.cache_isolation = isolation
        self.sessions = sessions

    async def body(self, request: Request) -> bytes:
        """The body, read at most up to the limit (a client lying about or omitting
        Content-Length cannot make the server buffer more)."""
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            raise ApiError("the request body must be JSON (Content-Type: application/json)", status=415)
        limit = self.limits.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self.drain(request, int(declared))
            raise ApiError(f"the request body is over the limit of {limit:,} bytes", status=413)
        chunks, size = [], 0
        stream = request.stream()
        async for chunk in stream:
            size += len(chunk)
            if size > limit:
                await self.drain(request, None, stream)
                raise ApiError(f"the request body is over the limit of {limit:,} bytes", status=413)
            chunks.append(chunk)
        return b"".join(chunks)

    async def drain(self, request: Request, declared: int | None, stream=None) -> None:
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

    def check_counts(self, prompts: int, n: int) -> None:
        if prompts > self.limits.prompts_per_request:
            raise ApiError(f"'prompt' holds {prompts} prompts; at most {self.limits.prompts_per_request} per request", param="prompt")
        if prompts * n > self.limits.max_choices:
            raise ApiError(
                f"{prompts} prompts x n={n} is {prompts * n} choices; at most {self.limits.max_choices} per request", param="n"
            )

    def authorize(self, request: Request) -> str | None:
        """The caller's API key (None without authentication); 401 for a missing or wrong one."""
        if not self.api_keys:
            return None
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or token.strip() not in self.api_keys:
            raise ApiError("invalid or missing API key (Authorization: Bearer <key>)", status=401, code="invalid_api_key")
        return token.strip()

    def authorize_metrics(self, request: Request) -> None:
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

    def salt(self, request: Request, sampling: Sampling) -> str | None:
        """The prefix-cache partition of a request: its API key's (per-key isolation) and its cache_salt."""
        parts = []
        key = request.scope.get("aisql_api_key")
        if key is not None and self.cache_isolation == "per-key":
            parts.append(self.api_keys[key])
        if sampling.cache_salt:
            parts.append(hashlib.sha256(sampling.cache_salt.encode()).hexdigest()[:16])
        return ":".join(parts) or None

    def session(self, request: Request, sampling: Sampling, salt: str | None) -> str | None:
        """The conversation a request belongs to, where the client names one (the X-Session-Id
        header, else OpenAI's `user`), within the request's cache partition."""
        if not self.sessions:
            return None
        named = request.headers.get("x-session-id") or sampling.user
        if not named:
            return None
        return f"{salt or ''}|{named[:256]}"
