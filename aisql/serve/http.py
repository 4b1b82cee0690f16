"""The HTTP edge of `aisql serve`: uvicorn's h11 protocol with the limits it lacks.

uvicorn closes idle keep-alive connections, but not a connection that opens and then sends
nothing, or sends its headers a byte at a time: thousands of those exhaust file descriptors and
take the server down. Here every request must arrive whole within `read_timeout` seconds of its
first byte (or of the connection); a connection beyond `max_connections` takes the slot of the
one that has waited longest without a whole request (slowloris drips, idle keep-alives), and is
closed on arrival only when every slot is busy answering; repeated log lines (an accept loop out
of descriptors) are written at most once every few seconds.
"""

from __future__ import annotations

import logging
import resource
import time

from uvicorn.protocols.http.h11_impl import H11Protocol


def guarded_protocol(*, read_timeout: float, max_connections: int) -> type[H11Protocol]:
    """An H11Protocol class enforcing these limits (uvicorn.Config(http=...) takes a class), with
    its own counters."""
    limits = {"read_timeout": read_timeout, "max_connections": max_connections, "refused": 0, "timed_out": 0, "evicted": 0}
    return type("GuardedH11Protocol", (GuardedH11Protocol,), limits)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a read timeout per request and a connection cap (each
    server gets its own subclass with its limits: `guarded_protocol`)."""

    read_timeout = 30.0
    max_connections = 1000
    refused = 0  # connections closed on arrival: over max_connections
    timed_out = 0  # connections closed for a request that did not arrive in time

    evicted = 0  # connections closed to make room: the longest still waiting for their request

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._read_timer = None
        self._waiting_since: float | None = self.loop.time()  # no whole request yet
        if len(self.connections) > self.max_connections and not self._evict_the_slowest():
            type(self).refused += 1
            self.connections.discard(self)
            transport.abort()
            return
        self._start_read_timer()

    def _evict_the_slowest(self) -> bool:
        """Room for a new connection: close the one that has waited longest without a whole
        request (a slowloris drip, an idle keep-alive) — never one whose request the app is
        answering. A client sending whole requests is in and out in milliseconds; slots
        held by slow senders go to new arrivals instead of new arrivals being reset."""
        waiting = [c for c in self.connections if c is not self and getattr(c, "_waiting_since", None) is not None]
        if not waiting:
            return False
        slowest = min(waiting, key=lambda c: c._waiting_since)
        type(self).evicted += 1
        slowest._stop_read_timer()
        slowest.connections.discard(slowest)
        slowest.transport.abort()
        return True

    def data_received(self, data: bytes) -> None:
        if self._read_timer is None and (self.cycle is None or self.cycle.response_complete):
            self._start_read_timer()  # the next request on a kept-alive connection
            self._waiting_since = self.loop.time()
        super().data_received(data)
        if self.cycle is not None and not self.cycle.more_body:
            self._stop_read_timer()  # the request is in: the app has it whole
            self._waiting_since = None

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._waiting_since is None:
            self._waiting_since = self.loop.time()  # kept alive, idle until its next request

    def connection_lost(self, exc) -> None:
        self._stop_read_timer()
        super().connection_lost(exc)

    def _start_read_timer(self) -> None:
        self._read_timer = self.loop.call_later(self.read_timeout, self._read_timed_out)

    def _stop_read_timer(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _read_timed_out(self) -> None:
        self._read_timer = None
        type(self).timed_out += 1
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        self.transport.abort()


def raise_descriptor_limit(wanted: int) -> int:
    """Lift the soft limit on open files towards `wanted` (within the hard limit); returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


class RepeatFilter(logging.Filter):
    """Let a given message through at most once every `interval` seconds (with a count of the
    ones dropped meanwhile)."""

    def __init__(self, interval: float = 10.0) -> None:
        super().__init__()
        self.interval = interval
        self._last: dict[str, tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = f"{record.name}:{record.levelno}:{record.getMessage()[:200]}"
        now = time.monotonic()
        last, dropped = self._last.get(key, (0.0, 0))
        if now - last < self.interval:
            self._last[key] = (last, dropped + 1)
            return False
        if dropped:
            record.msg = f"{record.getMessage()} ({dropped} like it not shown)"
            record.args = ()
        self._last[key] = (now, 0)
        if len(self._last) > 1000:
            self._last.clear()
        return True


def quiet_repeats(interval: float = 10.0) -> None:
    """Rate-limit the loggers an overloaded server floods (asyncio's accept loop, uvicorn)."""
    for name in ("asyncio", "uvicorn.error"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RepeatFilter) for f in logger.filters):
            logger.addFilter(RepeatFilter(interval))
