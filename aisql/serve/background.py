"""Run `aisql serve`'s app on a background thread (notebooks, tests, benchmarks on loopback)."""

from __future__ import annotations

import threading
import time

import uvicorn

from aisql.engine.hf import HFEngine
from aisql.serve.app import OpenAIServer


class BackgroundServer:
    """`with BackgroundServer(engine, "name") as server: openai.OpenAI(base_url=server.base_url + "/v1")`"""

    def __init__(self, engine: HFEngine, model_name: str, *, host: str = "127.0.0.1", port: int = 0, **options) -> None:
        self.api = OpenAIServer(engine, model_name, **options)
        self._http = uvicorn.Server(uvicorn.Config(self.api.app, host=host, port=port, log_level="warning"))
        self._thread = threading.Thread(target=self._http.run, name="aisql-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 60
        while not self._http.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start on {host}:{port}")
            time.sleep(0.01)
        bound = self._http.servers[0].sockets[0].getsockname()
        self.base_url = f"http://{host}:{bound[1]}"

    def stop(self) -> None:
        self._http.should_exit = True
        self._thread.join(timeout=30)

    def __enter__(self) -> BackgroundServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
