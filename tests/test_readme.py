"""The README and the reference in docs/ run as written: every ```sh and ```python block is
executed, unless the line before it is a `<!-- readme-test: skip (reason) -->` comment (set-up
commands, which .ci/run runs; a Ray cluster; a download). The `<!-- readme-test: server -->` block
is started as written (its --port made a free one) and the `<!-- readme-test: client -->` block
runs against it. The README stays a front door: under 150 lines.

Shell blocks run line by line from a copy of the repository root's `examples/` (so the commands'
paths are the repository's, and what they write stays out of the checkout), with the tiny model
as the default ($AISQL_MODEL: the commands that name a model get that model) and one result
cache for the whole README; Python blocks run from the repository root.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every README block, run as a user would (subprocesses, a server)

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"(?:<!-- readme-test: (?P<tag>\w+)[^>]*-->\n)?```(?P<lang>sh|python)\n(?P<body>.*?)```", re.S)


DOCUMENTS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))


def blocks() -> list[tuple[str, str, str, str]]:
    """(tag, language, body, where: 'FILE line N') of every runnable block."""
    found = []
    for document in DOCUMENTS:
        text = document.read_text()
        for m in FENCE.finditer(text):
            where = f"{document.relative_to(ROOT)} line {text[: m.start()].count(chr(10)) + 1}"
            found.append((m.group("tag") or "run", m.group("lang"), m.group("body"), where))
    return found


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    directory = tmp_path_factory.mktemp("readme")
    shutil.copytree(ROOT / "examples", directory / "examples", ignore=shutil.ignore_patterns("target", "logs", "*.duckdb", "__pycache__"))
    env = dict(os.environ, AISQL_MODEL="tiny", AISQL_CACHE_DIR=str(directory / "cache"))
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return directory, env


def test_every_block_is_run_or_says_why_not():
    found = blocks()
    assert len(found) >= 12
    for tag, _, _, where in found:
        assert tag in ("run", "skip", "server", "client"), f"{where}: unknown readme-test tag {tag!r}"


def test_the_readme_is_a_front_door():
    """What it is, the two set-up commands, one example with its output, where to go next: the
    reference lives in docs/, and every docs page is linked from the README."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 150
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"docs/{page.name}" in text, f"README does not link docs/{page.name}"


@pytest.mark.parametrize("tag, lang, body, line", [b for b in blocks() if b[0] == "run" and b[1] == "sh"], ids=lambda v: v if isinstance(v, str) and " line " in v else None)
def test_shell_block(scratch, tag, lang, body, line):
    directory, env = scratch
    for command in [c for c in body.splitlines() if c.strip() and not c.lstrip().startswith("#")]:
        done = subprocess.run(["bash", "-c", command], cwd=directory, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, f"{line}: {command}\n{done.stderr[-2000:]}"
        assert "Traceback" not in done.stderr


@pytest.mark.parametrize("tag, lang, body, line", [b for b in blocks() if b[0] == "run" and b[1] == "python"], ids=lambda v: v if isinstance(v, str) and " line " in v else None)
def test_python_block(scratch, tag, lang, body, line):
    _, env = scratch
    done = subprocess.run([sys.executable, "-c", body], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{line}\n{done.stderr[-2000:]}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_client_block_against_the_served_model(scratch):
    """`aisql serve` as the README writes it (the model it names, offline), and the client block."""
    (server,) = [b for b in blocks() if b[0] == "server"]
    (client,) = [b for b in blocks() if b[0] == "client"]
    command = server[2].split("#")[0].strip()
    port = free_port()
    directory, env = scratch
    process = subprocess.Popen(
        ["bash", "-c", "exec " + command.replace("--port 8000", f"--port {port}")],
        cwd=directory, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 600  # a hang guard: the first use converts the model (~30 s)
        while True:
            assert process.poll() is None, process.stderr.read()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=30) as response:
                    if response.status == 200:
                        break
            except OSError:
                assert time.monotonic() < deadline, "aisql serve did not come up"
                time.sleep(0.2)
        body = client[2].replace("http://127.0.0.1:8000", f"http://127.0.0.1:{port}")
        done = subprocess.run([sys.executable, "-c", body], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    finally:
        process.terminate()
        process.wait(timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip()
