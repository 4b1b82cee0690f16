"""Run `aisql serve`'s app: the listening socket bound first (a taken port is one clear error,
before anything claims to serve), uvicorn over the guarded protocol (aisql.serve.http). The CLI
runs it in the foreground; `BackgroundServer` on a thread (notebooks, tests, benchmarks)."""

from __future__ import annotations

import errno
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
    """A bound, listening TCP socket, or one error line saying why not (the address, or the port)."""
    where = host_port(host, port)
    try:
        family, kind, protocol, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError) as err:
        raise AisqlError(
            f"cannot listen on {where}: {host!r} is not an address or host name ({getattr(err, 'strerror', None) or err})",
            hint=_HOST_HINT,
        ) from None
    sock = socket.socket(family, kind, protocol)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError as err:
        sock.close()
        reason = err.strerror or str(err)
        if err.errno == errno.EADDRNOTAVAIL:
            raise AisqlError(f"cannot listen on {where}: {host} is not an address of this machine ({reason})", hint=_HOST_HINT) from None
        if err.errno == errno.EACCES and port < 1024:
            raise AisqlError(f"cannot listen on {where}: {reason}", hint="ports below 1024 need privileges: choose --port 8000 or another above 1023") from None
        raise AisqlError(f"cannot listen on {where}: {reason}", hint="choose another --port, or stop what uses it") from None
    return sock


_HOST_HINT = "--host takes an address of this machine: 127.0.0.1 (this machine only), 0.0.0.0 (every IPv4 interface), ::1, :: or a host name"


def host_port(host: str, port: int) -> str:
    """`host:port` as a URL writes it: an IPv6 address in brackets ([::1]:8000)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


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
        while not self._http.started:  # started, or its thread ended (an error): no clock decides
            if not self._thread.is_alive():
                raise RuntimeError(f"the server did not start on {host_port(host, port)}")
            time.sleep(0.01)
        self.port = self._socket.getsockname()[1]
        self.base_url = f"http://{host_port(host, self.port)}"

    def stop(self) -> None:
        self._http.should_exit = True
        self._thread.join(timeout=30)
        self._socket.close()

    def __enter__(self) -> BackgroundServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
