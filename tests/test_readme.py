"""The README runs as written: every ```sh and ```python block is executed, unless the line before
it is a `<!-- readme-test: skip (reason) -->` comment (set-up commands, which .ci/run runs; a
server that runs until stopped). A `<!-- readme-test: client ... -->` block runs against a server
this test starts (tiny, on a free loopback port).

Shell blocks run line by line in a scratch directory holding `query.sql` (the main example),
its `data/` and `people.csv`, with the tiny model as the default ($AISQL_MODEL) and one result
cache for the whole README; Python blocks run from the repository root.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every README block, run as a user would (subprocesses, a server)

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"(?:<!-- readme-test: (?P<tag>\w+)[^>]*-->\n)?```(?P<lang>sh|python)\n(?P<body>.*?)```", re.S)


def blocks() -> list[tuple[str, str, str, int]]:
    text = (ROOT / "README.md").read_text()
    return [
        (m.group("tag") or "run", m.group("lang"), m.group("body"), text[: m.start()].count("\n") + 1)
        for m in FENCE.finditer(text)
    ]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    directory = tmp_path_factory.mktemp("readme")
    shutil.copy(ROOT / "examples" / "hot_leads.sql", directory / "query.sql")
    shutil.copytree(ROOT / "examples" / "data", directory / "data")
    shutil.copy(ROOT / "examples" / "data" / "customers.csv", directory / "people.csv")
    env = dict(os.environ, AISQL_MODEL="tiny", AISQL_CACHE_DIR=str(directory / "cache"))
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return directory, env


def test_every_block_is_run_or_says_why_not():
    found = blocks()
    assert len(found) >= 7
    for tag, _, _, line in found:
        assert tag in ("run", "skip", "client"), f"README line {line}: unknown readme-test tag {tag!r}"


@pytest.mark.parametrize("tag, lang, body, line", [b for b in blocks() if b[0] == "run" and b[1] == "sh"], ids=lambda v: str(v) if isinstance(v, int) else None)
def test_shell_block(scratch, tag, lang, body, line):
    directory, env = scratch
    for command in [c for c in body.splitlines() if c.strip() and not c.lstrip().startswith("#")]:
        done = subprocess.run(["bash", "-c", command], cwd=directory, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, f"README line {line}: {command}\n{done.stderr[-2000:]}"
        assert "Traceback" not in done.stderr


@pytest.mark.parametrize("tag, lang, body, line", [b for b in blocks() if b[0] == "run" and b[1] == "python"], ids=lambda v: str(v) if isinstance(v, int) else None)
def test_python_block(scratch, tag, lang, body, line):
    _, env = scratch
    done = subprocess.run([sys.executable, "-c", body], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"README line {line}\n{done.stderr[-2000:]}"


def test_client_block_against_a_served_model(scratch, tiny_engine):
    from aisql.serve.background import BackgroundServer

    (client,) = [b for b in blocks() if b[0] == "client"]
    _, env = scratch
    with BackgroundServer(tiny_engine, "Qwen/Qwen3-0.6B") as server:  # the name the README's client asks for
        body = client[2].replace("http://127.0.0.1:8000", server.base_url)
        done = subprocess.run([sys.executable, "-c", body], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip()
