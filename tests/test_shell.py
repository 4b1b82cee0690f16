"""`aisql shell`'s input handling (aisql.shell), without a model: where statements end, what
happens to a statement still open at the end of input, dot-commands, bad bytes, long input."""

from __future__ import annotations

import io
import sys

import pytest

from aisql import shell
from aisql.shell import StatementSplitter, complete_statements, run_shell


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def interactive(monkeypatch, typed: list[str], run_one=None) -> tuple[list[str], int]:
    """Run the shell as if `typed` were typed at a terminal, then Ctrl-D; return what ran
    (`run_one` runs each statement after it is recorded)."""
    ran: list[str] = []
    feed = iter(typed)

    def fake_input(prompt: str) -> str:
        try:
            return next(feed)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr("builtins.input", fake_input)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(shell, "_history", lambda: None)
    code = run_shell(None, lambda statement: (ran.append(statement), run_one and run_one(statement)), Terminal())
    return ran, code


def test_ctrl_d_discards_an_unfinished_statement(monkeypatch, capsys):
    """`DELETE FROM t` + Enter + Ctrl-D used to run the DELETE."""
    ran, code = interactive(monkeypatch, ["SELECT 1;", "DELETE FROM t"])
    assert ran == ["SELECT 1;"] and code == 0
    assert "unfinished statement discarded" in capsys.readouterr().err


def test_piped_script_runs_its_last_statement_without_semicolon():
    ran: list[str] = []
    assert run_shell(None, ran.append, io.StringIO("SELECT 1;\nSELECT 2\n-- done\n")) == 0
    assert ran == ["SELECT 1;", "\nSELECT 2\n-- done\n"]
    ran.clear()
    assert run_shell(None, ran.append, io.StringIO("SELECT 1;\n-- done\n")) == 0
    assert ran == ["SELECT 1;"]  # a trailing comment is no statement


def test_statements_before_an_unclosed_comment_run(capsys):
    ran: list[str] = []
    assert run_shell(None, ran.append, io.StringIO("SELECT 1; /* never closed\nSELECT 2;\n")) == 1
    assert ran == ["SELECT 1;"]
    assert "ends inside an unclosed /* comment" in capsys.readouterr().err


def test_dot_commands_need_no_semicolon(capsys):
    ran: list[str] = []
    assert run_shell(None, ran.append, io.StringIO("SELECT 1;\n.quit\nSELECT 2;\n")) == 0
    assert ran == ["SELECT 1;"]
    assert run_shell(None, ran.append, io.StringIO(".nonsense\n")) == 1
    assert "unknown command '.nonsense'" in capsys.readouterr().err


def test_invalid_utf8_names_the_line_and_skips_its_statement(capsys):
    stream = io.TextIOWrapper(io.BytesIO(b"SELECT 1;\nSELECT \xff;\nSELECT 3;\n"), encoding="utf-8")
    ran: list[str] = []
    assert run_shell(None, ran.append, stream) == 1
    assert ran == ["SELECT 1;", "SELECT 3;"]
    assert "input line 2 is not valid UTF-8" in capsys.readouterr().err


@pytest.mark.parametrize("dialect", [None, "bigquery"])
def test_splitter_matches_one_whole_tokenization(dialect):
    """Fed a line at a time, the splitter cuts where tokenizing the whole text at once cuts."""
    script = "SELECT 'a;\nb' AS x; -- c;\nSELECT /* d; */ 2;\nSELECT \"e;\nf\";\nSELECT 3\n;\n"
    whole, rest = complete_statements(script, dialect)
    splitter = StatementSplitter(dialect)
    fed = [piece for line in script.splitlines(keepends=True) for piece in splitter.feed(line)]
    assert [s.strip() for s in fed] == [s.strip() for s in whole] and len(whole) == 4


def test_a_long_statement_is_tokenized_about_once(monkeypatch):
    """A 4,000-line statement (~160 KB) used to be re-tokenized whole after every line."""
    splitter = StatementSplitter()
    tokenized = []
    real = splitter._tokens
    monkeypatch.setattr(splitter, "_tokens", lambda text: (tokenized.append(len(text)), real(text))[1])
    splitter.feed("INSERT INTO t VALUES\n")
    for i in range(4000):
        assert splitter.feed(f"('row {i} with; a semicolon', {i}),\n") == []
    (statement,) = splitter.feed("('last', 0);\n")
    assert len(statement) > 140_000
    assert sum(tokenized) < 3 * len(statement)


def shell_session(script: str):
    """`aisql shell` over piped input, in process (no model is loaded: no AI call runs)."""
    from click.testing import CliRunner

    from aisql.cli import main

    return CliRunner().invoke(main, ["shell", "--no-cache"], input=script)


def test_dot_commands_as_duckdb_spells_them():
    script = (
        "CREATE TABLE reviews AS SELECT 1 AS id, 'good' AS text;\n"
        "CREATE VIEW happy AS SELECT * FROM reviews;\n"
        ".tables\n"
        ".tables rev%\n"
        ".schema happy\n"
        ".mode csv\n"
        "SELECT id, text FROM reviews;\n"
        ".mode\n"
        ".help\n"
        ".quit\n"
        "SELECT 'never run';\n"
    )
    done = shell_session(script)
    assert done.exit_code == 0, done.output
    out = done.stdout
    assert "happy  reviews" in out
    assert "\nreviews\n" in out  # the pattern leaves the view out
    assert "CREATE VIEW happy AS SELECT * FROM reviews;" in out
    assert "id,text\n1,good" in out  # .mode csv took effect
    assert "current output mode: csv" in out
    assert ".schema [PATTERN]" in out and "never run" not in out


def test_a_bad_dot_command_is_an_error_that_names_its_line():
    done = shell_session("SELECT 1;\n.mode yaml\n.frobnicate\n")
    assert done.exit_code == 1
    assert "unknown mode 'yaml' (line 2, column 1)" in done.stderr
    assert "unknown command '.frobnicate' (line 3, column 1)" in done.stderr
    assert ".help" in done.stderr


def test_a_piped_script_error_names_its_line_in_the_script():
    """Errors used to be placed within their statement: `line 1` for a statement on line 4."""
    script = "SELECT 1;\n\n-- a comment\nSELECT 2; SELECT AI.IF(PROMPT('{nope}')) FROM (SELECT 1 AS x);\nSELECT 3;\n"
    done = shell_session(script)
    assert done.exit_code == 1
    assert "(line 4, column" in done.stderr, done.stderr
    column = int(done.stderr.split("(line 4, column ")[1].split(")")[0])
    assert column > len("SELECT 2; ")  # placed in the script's line, after the first statement


def test_ctrl_c_stops_a_piped_script(capsys):
    """Was: the statements after the interrupted one ran and the script exited 0."""
    ran: list[str] = []

    def run_one(statement: str) -> None:
        ran.append(statement.strip())
        if "slow" in statement:
            raise KeyboardInterrupt

    code = run_shell(None, run_one, io.StringIO("SELECT 1;\nSELECT 'slow';\nSELECT 3;\n"))
    assert code == 130 and ran == ["SELECT 1;", "SELECT 'slow';"]
    assert capsys.readouterr().err.startswith("interrupted: no answers were computed")


def test_ctrl_c_at_a_terminal_cancels_one_statement(monkeypatch, capsys):
    def run_one(statement: str) -> None:
        if "slow" in statement:
            raise KeyboardInterrupt

    ran, code = interactive(monkeypatch, ["SELECT 'slow';", "SELECT 2;"], run_one)
    assert [statement.strip() for statement in ran] == ["SELECT 'slow';", "SELECT 2;"] and code == 0
    assert "interrupted" in capsys.readouterr().err


def test_a_flockmtl_prompt_lives_across_shell_statements():
    """CREATE PROMPT in one statement, used by a later one (AISQL_MODEL is the tiny model here)."""
    script = (
        "CREATE TABLE p AS SELECT 1 AS id, 'A bamboo toothbrush' AS d;\n"
        "CREATE PROMPT('eco', 'Is this product eco-friendly?');\n"
        ".mode csv\n"
        "SELECT id, llm_filter({'model_name': 'gpt-4o'}, {'prompt_name': 'eco', 'context_columns': [{'data': d}]}) AS eco FROM p;\n"
    )
    done = shell_session(script)
    assert done.exit_code == 0, done.output
    assert "prompt 'eco' version 1" in done.stdout and "id,eco" in done.stdout
