"""Run `aisql serve`'s app: the listening socket bound first (a taken port is one clear error,
before anything claims to serve), uvicorn over the guarded protocol (aisql.serve.http). The CLI
runs it in the foreground; `BackgroundServer` on a thread (notebooks, tests, benchmarks)."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass

import uvicorn

from aisql.engine.backends.hf import HFEngine
from aisql.errors import AisqlError
from aisql.serve.app import OpenAIServer
from aisql.serve.http import guarded_protocol, quiet_repeats, raise_descriptor_limit


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int = 1024  # open connections; more are closed as they arrive
    read_timeout: float = 30.0  # seconds for a request to arrive whole (headers and body)
    keep_alive: int = 5  # seconds an idle kept-alive connection stays open


def listen(host: str, port: int) -> socket.socket:
    """A bound, listening TCP socket, or one error line saying why not."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as err:
        sock.close()
        raise AisqlError(f"cannot listen on {host}:{port}: {err.strerror or err}", hint="choose another --port, or stop what uses it") from None
    return sock


def uvicorn_server(app, limits: ConnectionLimits = ConnectionLimits()) -> uvicorn.Server:
    raise_descriptor_limit(limits.max_connections + 256)
    quiet_repeats()
    config = uvicorn.Config(
        app,
        http=guarded_protocol(read_timeout=limits.read_timeout, max_connections=limits.max_connections),
        timeout_keep_alive=limits.keep_alive,
        log_level="warning",
        timeout_graceful_shutdown=5,
        lifespan="on",
    )
    return uvicorn.Server(config)


class BackgroundServer:
    """`with BackgroundServer(engine, "name") as server: openai.OpenAI(base_url=server.base_url + "/v1")`"""

    def __init__(
        self,
        engine: HFEngine,
        model_name: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        connection_limits: ConnectionLimits = ConnectionLimits(),
        **options,
    ) -> None:
        self.api = OpenAIServer(engine, model_name, **options)
        self._socket = listen(host, port)
        self._http = uvicorn_server(self.api.app, connection_limits)
        self._thread = threading.Thread(target=self._http.run, kwargs={"sockets": [self._socket]}, name="aisql-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 60
        while not self._http.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start on {host}:{port}")
            time.sleep(0.01)
        self.port = self._socket.getsockname()[1]
        self.base_url = f"http://{host}:{self.port}"

    def stop(self) -> None:
        self._http.should_exit = True
        self._thread.join(timeout=30)
        self._socket.close()

    def __enter__(self) -> BackgroundServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
