"""The bad-input corpus (tests/bad_inputs/*.json): every case is one clear error, exit code 1.

Each case runs the real CLI in-process in its own directory; see tests/bad_inputs/README.md.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from aisql.cli import main

CORPUS = Path(__file__).parent / "bad_inputs"
CASES = sorted(CORPUS.glob("*.json"))


def test_corpus_is_large_enough():
    assert len(CASES) >= 40


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_bad_input_is_one_clear_error(path: Path, tmp_path: Path, monkeypatch):
    case = json.loads(path.read_text(encoding="utf-8"))
    for data_file in (CORPUS / "data").iterdir():
        shutil.copy(data_file, tmp_path / data_file.name)
    for name, content in case.get("files", {}).items():
        _write(tmp_path / name, content)
    args = _command_line(case, tmp_path)
    monkeypatch.chdir(tmp_path)

    result = CliRunner().invoke(main, args)

    output = result.stdout + result.stderr
    assert "Traceback" not in output, output
    assert result.exit_code == 1, f"{case['description']}: exit {result.exit_code}\n{output}"
    assert result.stdout == "", f"error output leaked into stdout: {result.stdout!r}"
    error_line = next((line for line in result.stderr.splitlines() if line.startswith("error:")), "")
    expected = case["expect"] if isinstance(case["expect"], list) else [case["expect"]]
    for text in expected:
        assert text in error_line, f"{case['description']}: {text!r} not in {error_line!r}"
    if "position" in case:
        assert f"({case['position']})" in error_line, error_line


def _command_line(case: dict, directory: Path) -> list[str]:
    if "sql" in case:
        (directory / "query.sql").write_text(case["sql"], encoding="utf-8")
        args = ["run", "query.sql"]
    else:
        args = list(case["args"])
    if args[0] == "run":
        if "--model" not in args:
            args += ["--model", case.get("model", "tiny")]
        if "cache" in case:
            args += ["--cache", case["cache"]]
        elif "--cache" not in args and "--no-cache" not in args:
            args.append("--no-cache")
    return args + case.get("extra", [])


def _write(path: Path, content) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    elif "base64" in content:
        path.write_bytes(base64.b64decode(content["base64"]))
    else:
        path.write_text("".join(text * times for text, times in content["parts"]), encoding="utf-8")
