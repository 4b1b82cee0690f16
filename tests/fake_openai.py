"""A small OpenAI-compatible server that misbehaves on request (issue 58): the remote backend's
tests point `--model openai:tiny@URL` at it and make it answer as broken servers do.

It serves `/v1/models` and `/v1/completions` from a thread. By default it answers like
llama-cpp-python's server: it ignores `allowed_token_ids`, so aisql scores one-token labels from
the top logprobs and longer ones by echo; `answer(body) -> dict` builds the default reply, and a
test replaces `server.models` or `server.reply` (called with the request body and the default
reply) to break it. `server.silent` set: every completion is accepted and never answered (until
the server stops). `server.bodies` keeps the request bodies.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from collections.abc import Callable


def _default_logprobs(body: dict) -> dict:
    top = int(body.get("logprobs") or 0)
    # It answers ' Hello' whatever allowed_token_ids asks (as llama-cpp-python's server does); the
    # tiny model's labels ' Yes' / ' No' (one token each, with a leading space) are in its top logprobs.
    tokens = [" Hello"]
    entry = {" Hello": -0.7, " Yes": -1.0, " No": -2.0, " Maybe": -3.0}
    if body.get("echo"):  # the prompt's own tokens, each given a logprob, then the one generated
        prompt = body["prompt"]
        count = len(prompt) if isinstance(prompt, list) else max(1, len(str(prompt).split()))
        return {"tokens": ["t"] * count + tokens, "token_logprobs": [None] + [-1.0] * (count - 1) + [-0.7], "top_logprobs": None, "text_offset": [0] * (count + 1)}
    return {
        "tokens": tokens,
        "token_logprobs": [-0.7],
        "top_logprobs": [dict(list(entry.items())[: max(top, 1)])] if top else None,
        "text_offset": [0],
    }


def answer(body: dict) -> dict:
    """What a well-behaved server answers: one choice, logprobs where asked, usage."""
    text = "Yes" if int(body.get("max_tokens") or 16) <= 1 else "Yes it is"
    choice = {"index": 0, "text": text, "finish_reason": "length", "logprobs": _default_logprobs(body) if body.get("logprobs") is not None else None}
    return {
        "id": "cmpl-fake",
        "object": "text_completion",
        "created": 0,
        "model": body.get("model"),
        "choices": [choice],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
    }


class FakeOpenAIServer:
    def __init__(self, model: str = "tiny") -> None:
        self.models: list[dict] = [{"id": model, "object": "model", "owned_by": "fake", "max_model_len": 2048}]
        self.reply: Callable[[dict, dict], object] = lambda body, default: default
        self.raw_reply: Callable[[dict], bytes] | None = None  # the whole HTTP body, for replies JSON cannot build
        self.silent = threading.Event()
        self.stopping = threading.Event()
        self.bodies: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def _send(self, status: int, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                try:
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, json.dumps({"object": "list", "data": server.models}).encode())
                else:
                    self._send(404, b'{"error": {"message": "not found"}}')

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                server.bodies.append(body)
                if server.silent.is_set():
                    server.stopping.wait()  # accepted, never answered
                    return
                if server.raw_reply is not None:
                    self._send(200, server.raw_reply(body))
                    return
                reply = server.reply(body, answer(body))
                if isinstance(reply, tuple):  # (status, payload)
                    self._send(reply[0], json.dumps(reply[1]).encode())
                else:
                    self._send(200, json.dumps(reply, allow_nan=True).encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "FakeOpenAIServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def spec(self, model: str = "tiny") -> str:
        return f"openai:{model}@{self.base_url}"
