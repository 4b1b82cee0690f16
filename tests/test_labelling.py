"""`aisql label`: rows chosen to teach the most (diverse, then uncertain under the current rule),
answers taken from a terminal or a pipe, each label appended to the CSV file the query's
`examples => (SELECT ..., label FROM 'file.csv')` reads unchanged."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from aisql.cli import main
from aisql.errors import AisqlError
from aisql.labelling import Labelling, LabelError, labels_file_in, run_loop

ROOT = Path(__file__).resolve().parent.parent
QUERY = (
    "SELECT id, AI.IF(PROMPT('Is this review positive? {review}'), examples => (SELECT review, label FROM 'reviews.labels.csv')) AS positive\n"
    "FROM 'reviews.csv' ORDER BY id;\n"
)


@pytest.fixture
def query_dir(tmp_path: Path) -> Path:
    (tmp_path / "reviews.csv").write_bytes((ROOT / "examples" / "data" / "reviews.csv").read_bytes())
    (tmp_path / "q.sql").write_text(QUERY)
    return tmp_path


def labelling_of(make_connection, directory: Path, **kwargs) -> Labelling:
    con = make_connection()
    con.add_file_search_path([directory])
    return Labelling(con, QUERY, query_dir=directory, **kwargs)


def test_the_labels_file_is_the_one_the_examples_read():
    assert labels_file_in("SELECT review, label FROM 'my labels.csv'") == "my labels.csv"
    assert labels_file_in("SELECT review, label FROM labelled") is None  # a table: --labels names the file
    assert labels_file_in("SELECT a.review, b.label FROM 'a.csv' a JOIN 'b.csv' b USING (id)") is None
    assert labels_file_in(None) is None


def test_diverse_rows_first_then_the_least_sure_and_each_label_kept_at_once(make_connection, query_dir):
    labelling = labelling_of(make_connection, query_dir)
    assert labelling.path == query_dir / "reviews.labels.csv" and labelling.reads_file
    assert labelling.ask_model() == 12 and len(labelling.candidates) == 12  # the 12 distinct reviews
    shown = []
    answers = iter(["y", "n", "maybe", "y", "n", "s", "y"])

    def read(prompt: str):
        return next(answers, None)

    added = run_loop(labelling, read, shown.append)
    assert added == 5  # 'maybe' asked again, 's' skipped, then the input ended
    assert any(line.startswith("not a label: a label of AI.IF is TRUE or FALSE") for line in shown)
    assert any("answers under labels from 4 labelled examples (2 false, 2 true)" in line for line in shown)  # once both answers have two
    lines = (query_dir / "reviews.labels.csv").read_text().splitlines()
    assert lines[0] == "review,label" and len(lines) == 6
    texts = [line.split(" asks: ", 1)[1] for line in shown if " asks: " in line]
    assert len(texts) == len(set(texts)) == 7  # 5 labelled, 1 skipped, 1 open when the input ended: never a row twice
    # a later session goes on where this one stopped: the labelled rows are not offered again
    again = labelling_of(make_connection, query_dir)
    again.ask_model()
    assert len(again.labelled) == 5 and len(again.candidates) == 7
    assert {c.values for c in again.candidates}.isdisjoint({l.values for l in again.labelled})


def test_a_file_of_another_call_or_a_bad_line_is_one_clear_error(make_connection, query_dir):
    (query_dir / "reviews.labels.csv").write_text("text,label\nfoo,true\n")
    with pytest.raises(LabelError, match=r"is not this call's labels file: its header is text, label, expected review, label"):
        labelling_of(make_connection, query_dir)
    (query_dir / "reviews.labels.csv").write_text("review,label\nfoo,perhaps\n")
    with pytest.raises(LabelError, match=r"line 2: a label of AI.IF is TRUE or FALSE"):
        labelling_of(make_connection, query_dir)
    with pytest.raises(LabelError, match="no call ai_9 to label"):
        labelling_of(make_connection, query_dir, call="ai_9")


def test_classify_labels_by_number_or_name(make_connection, tmp_path):
    con = make_connection()
    labelling = Labelling(con, "SELECT AI.CLASSIFY(PROMPT('{review}'), ['good', 'bad', 'mixed']) AS c FROM reviews", labels_path=tmp_path / "l.csv")
    labelling.ask_model()
    assert labelling.parse("2") == "bad" and labelling.parse(" Mixed ") == "mixed"
    with pytest.raises(ValueError):
        labelling.parse("4")
    assert labelling.choices() == "1 = good, 2 = bad, 3 = mixed"


def test_a_query_with_nothing_to_label_says_so(make_connection, tmp_path):
    con = make_connection()
    with pytest.raises(AisqlError, match="no AI.IF, AI.CLASSIFY or AI.SCORE call to label"):
        Labelling(con, "SELECT AI.GENERATE(PROMPT('{review}')) FROM reviews", labels_path=tmp_path / "l.csv")
    with pytest.raises(AisqlError, match="2 calls to label: ai_1, ai_2"):
        Labelling(con, "SELECT AI.IF(PROMPT('{review}')), AI.IF(PROMPT('{review}?')) FROM reviews", labels_path=tmp_path / "l.csv")


def test_the_shell_labels_the_last_statement_from_its_own_input(query_dir, monkeypatch):
    monkeypatch.chdir(query_dir)
    script = "SELECT count(*) FROM 'reviews.csv' WHERE AI.IF(PROMPT('Is this review positive? {review}'));\n.label ai_1 shell.csv\ny\nn\nq\nSELECT 42 AS answer;\n"
    done = CliRunner().invoke(main, ["shell", "--model", "tiny", "--no-cache"], input=script)
    assert done.exit_code == 0, done.output
    assert (query_dir / "shell.csv").read_text().splitlines()[1:] != [] and len((query_dir / "shell.csv").read_text().splitlines()) == 3
    assert "2 labels added, 2 in shell.csv" in done.stderr and "42" in done.stdout  # the script goes on after the labels


# ---- end to end, as a user runs it --------------------------------------------------------------
def aisql_command() -> list[str]:
    return [sys.executable, "-m", "aisql.cli"]


@pytest.mark.slow
def test_label_over_a_pipe_then_the_query_reads_the_file_unchanged(query_dir):
    env = {**os.environ, "AISQL_MODEL": "tiny"}
    done = subprocess.run(
        [*aisql_command(), "label", "q.sql", "--no-cache", "--count", "4"], cwd=query_dir, input="y\nn\ny\nn\n", capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr
    assert "4 labels added, 4 in" in done.stderr and "the query reads them: aisql run q.sql" in done.stderr
    assert done.stdout == ""  # everything for people goes to stderr
    run = subprocess.run([*aisql_command(), "run", "q.sql", "--no-cache", "--format", "csv"], cwd=query_dir, capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "ai_1: answers under labels from 4 labelled examples (2 false, 2 true)" in run.stderr
    assert len(run.stdout.splitlines()) == 121


@pytest.mark.slow
def test_label_at_a_terminal(query_dir):
    """Through a pseudo-terminal: the prompt waits for a typed answer; Ctrl-D ends the session."""
    import pty

    master, slave = pty.openpty()
    env = {**os.environ, "AISQL_MODEL": "tiny", "TERM": "dumb"}
    process = subprocess.Popen(
        [*aisql_command(), "label", "q.sql", "--no-cache"], cwd=query_dir, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True
    )
    os.close(slave)
    seen = b""

    def wait_for(marker: bytes, deadline_s: float = 300) -> None:
        """Read the terminal until `marker` appears (an event; the deadline only stops a hang)."""
        nonlocal seen
        end = time.monotonic() + deadline_s
        while marker not in seen:
            ready, _, _ = select.select([master], [], [], max(0.0, end - time.monotonic()))
            if not ready:
                raise AssertionError(f"no {marker!r} from aisql label: {seen[-500:]!r}")
            try:
                seen += os.read(master, 4096)
            except OSError:  # the process ended: its side of the terminal closed
                raise AssertionError(f"aisql label ended before {marker!r}: {seen[-500:]!r}") from None

    try:
        for answer in (b"y", b"n", b"y", b"n"):
            mark = len(seen)
            wait_for(b"s = skip, q = quit): ")
            seen = seen[:mark] + seen[mark:].replace(b"s = skip, q = quit): ", b"", 1)  # this prompt answered
            os.write(master, answer + b"\n")
        wait_for(b"answers under labels from 4 labelled examples")
        wait_for(b"s = skip, q = quit): ")
        os.write(master, b"\x04")  # Ctrl-D: the end of input
        assert process.wait(timeout=300) == 0
        wait_for(b"4 labels added, 4 in")
    finally:
        if process.poll() is None:
            process.kill()
        os.close(master)
    lines = (query_dir / "reviews.labels.csv").read_text().splitlines()
    assert lines[0] == "review,label" and [l.rsplit(",", 1)[1] for l in lines[1:]] == ["true", "false", "true", "false"]
