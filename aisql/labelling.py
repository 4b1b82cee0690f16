"""`aisql label QUERY.sql`: labelled rows for users who have none.

A call answers best with a few labelled rows (`examples => ...`: aisql.functions.learning), and
the rows worth labelling are not the first ones in the table. This loop picks them from the
call's own input and asks a person for their answer, one at a time:

1. the call's distinct input rows (at most `pool`, a seeded choice) are asked of the model once,
   with their hidden states — the answers go to the result cache, so the query's own run later
   asks none of them again;
2. first rows that are *diverse*: the row most like the pool as a whole, then each time the one
   farthest from every row labelled so far (in the model's hidden states, standardised), until
   every answer has two labels; then rows *uncertain* under the current rule (the one the query
   would use with these labels): the smallest margin of its probe, or P(Yes) nearest its
   threshold; AI.SCORE keeps choosing diverse rows;
3. each label is appended to a CSV file at once (the prompt's columns and `label`: what
   `examples => (SELECT col, label FROM 'file.csv')` reads), so Ctrl-C or a closed pipe loses
   nothing, and a later session goes on where this one stopped;
4. once every answer has two labels, the rule the labels choose and its cross-validated quality
   (with its interval) are shown after each label, as the run's summary would show them.

The file is the call's own `examples => (SELECT ... FROM 'file.csv')` where the query reads one,
else `--labels PATH`, else QUERY.labels.csv beside the query. Answers come from any line reader:
a terminal or a pipe (`printf 'y\\nn\\n' | aisql label q.sql`).
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import sqlglot
from sqlglot import exp

from aisql.errors import AisqlError
from aisql.executor.store.answer_store import Answer
from aisql.functions.decision import Decision
from aisql.functions.hidden_states import unpack_states
from aisql.planner.plan import AINode

POOL = 256  # candidate rows asked of the model, at most
DIVERSE_PER_ANSWER = 2  # labels of each answer before uncertain rows are chosen


class LabelError(AisqlError):
    """A labelling session cannot start or go on."""


@dataclass
class Candidate:
    values: tuple[str, ...]  # the prompt's arguments, as text
    text: str  # the prompt
    answer: Answer  # the model's answer (label probabilities, hidden state)


@dataclass
class Labelled:
    values: tuple[str, ...]
    label: Any  # the function's answer: bool, a label, a number


def labels_file_in(examples_sql: str | None) -> str | None:
    """The file a call's `examples => (SELECT ... FROM 'file.csv')` reads, if it reads one CSV file."""
    if not examples_sql:
        return None
    try:
        tree = sqlglot.parse_one(examples_sql, read="duckdb")
    except sqlglot.errors.ParseError:
        return None
    tables = list(tree.find_all(exp.Table))
    if len(tables) != 1:
        return None
    name = tables[0].this
    if isinstance(name, exp.Identifier) and name.quoted and name.name.lower().endswith(".csv"):
        return name.name
    return None


def column_names(node: AINode) -> list[str]:
    """The labels file's columns for the call's arguments: the placeholders' column names, as
    `examples` matches them (aisql.executor.node.decisions), `arg1`, ... for expressions."""
    names = [arg.name if isinstance(arg, exp.Column) else f"arg{i + 1}" for i, arg in enumerate(node.call.args)]
    if len({n.lower() for n in names}) != len(names):  # {a.id} and {b.id}: by position
        names = [f"arg{i + 1}" for i in range(len(names))]
    if any(n.lower() == "label" for n in names):
        raise LabelError("a prompt argument is named label, which the labels file keeps for the answer", hint="rename it in the query (AS ...)")
    return names


class Labelling:
    """One labelling session over one AI call of a query (see the module docstring)."""

    def __init__(
        self,
        con,
        sql_text: str,
        *,
        call: str | None = None,
        labels_path: str | os.PathLike | None = None,
        default_path: str | os.PathLike = "labels.csv",
        query_dir: Path | None = None,
        pool: int = POOL,
    ) -> None:
        """`labels_path`: the file to write (else the one the call's examples read, else `default_path`)."""
        if pool < 1:
            raise LabelError("--pool must be 1 or more")
        self.con = con
        self.node = self._choose_node(sql_text, call)
        self.function = self.node.call.function
        self.task = self.node.call.task
        self.columns = column_names(self.node)
        self.written = labels_file_in(self.node.call.hints.get("examples"))  # as the query names it
        if labels_path is not None:
            self.path = Path(labels_path)
        elif self.written is not None:
            self.path = _resolve(self.written, query_dir)
        else:
            self.path = Path(default_path)
        self.reads_file = self.written is not None and _resolve(self.written, query_dir).resolve() == self.path.resolve()
        self.pool = pool
        self.labelled: list[Labelled] = self._read_labels()
        self.candidates: list[Candidate] = []
        self.skipped: set[str] = set()  # prompt texts skipped this session: never offered again in it

    # ---- the call and its rows --------------------------------------------------------------
    def _choose_node(self, sql_text: str, call: str | None) -> AINode:
        explanation = self.con.explain(sql_text)
        nodes = [n for plan in explanation.plans for n in plan.nodes if n.call.function.decides]
        if not nodes:
            raise LabelError("the query has no AI.IF, AI.CLASSIFY or AI.SCORE call to label", hint="labels teach the calls that answer from label probabilities")
        if call is None:
            if len(nodes) > 1:
                raise LabelError(f"the query has {len(nodes)} calls to label: {', '.join(n.id for n in nodes)}", hint="choose one with --call, e.g. --call " + nodes[0].id)
            return nodes[0]
        for node in nodes:
            if node.id == call:
                return node
        raise LabelError(f"no call {call} to label (calls: {', '.join(n.id for n in nodes)})")

    def _read_labels(self) -> list[Labelled]:
        """The labels file's rows, where it exists: its header must be the call's columns and label."""
        if not self.path.exists():
            return []
        try:
            with open(self.path, newline="", encoding="utf-8") as f:
                rows = list(csv.reader(f))
        except (OSError, UnicodeDecodeError, csv.Error) as err:
            raise LabelError(f"cannot read the labels file {self.path}: {err}") from None
        expected = [*self.columns, "label"]
        if not rows or [h.strip().lower() for h in rows[0]] != [c.lower() for c in expected]:
            found = ", ".join(rows[0]) if rows else "nothing"
            raise LabelError(f"{self.path} is not this call's labels file: its header is {found}, expected {', '.join(expected)}", hint="give another file with --labels")
        out = []
        for number, row in enumerate(rows[1:], start=2):
            if len(row) != len(expected):
                raise LabelError(f"{self.path}, line {number}: {len(row)} fields, expected {len(expected)}")
            try:
                out.append(Labelled(tuple(row[:-1]), self.parse(row[-1])))
            except ValueError as err:
                raise LabelError(f"{self.path}, line {number}: {err}") from None
        return out

    def input_rows(self) -> list[tuple[str, ...]]:
        """The call's distinct argument tuples with no NULL, at most `pool`, in a seeded order
        (DuckDB's hash of the values: the same rows every session)."""
        sql = self.node.estimate_sql or self.node.input_sql
        args = ", ".join(f"__aisql_a{i}" for i in range(self.node.call.arity))
        present = " AND ".join(f"__aisql_a{i} IS NOT NULL" for i in range(self.node.call.arity))
        query = f"SELECT {args} FROM ({sql}) AS __aisql_label_input WHERE {present} ORDER BY hash({args}), {args} LIMIT {int(self.pool)}"
        try:
            return [tuple(row) for row in self.con.duckdb.sql(query).fetchall()]
        except Exception as err:  # duckdb.Error: the input depends on what the script creates first
            raise LabelError(f"cannot read the rows of {self.node.id} before the query runs: {str(err).splitlines()[0]}") from None

    def ask_model(self, progress=None) -> int:
        """The pool's answers with hidden states (through the result cache: the query's run reuses
        them). Returns how many the model was asked."""
        from aisql.executor.answers.answer_types import RunOptions

        rows = self.input_rows()
        done = {self.node.call.template.render(list(l.values)) for l in self.labelled}
        template = self.node.call.template
        texts = {template.render(list(values)): values for values in rows}
        reads = self.con.session.reads_states()
        fitting = dataclasses.replace(self.task, decision=Decision("examples", keep_states=reads, fitting=True))
        answering = self.con.session.answering(RunOptions.of(progress=progress) if progress is not None else None)
        labelled_texts = list(done)
        known, counts = answering.answer_texts({t: 1 for t in [*texts, *labelled_texts]}, fitting, seen=set(), progress=(self.node.id, f"{self.node.call.describe()} [labelling]"))
        self.answers = known
        self.candidates = [Candidate(values, text, known[text]) for text, values in texts.items() if text not in done]
        return counts.prompts_evaluated

    # ---- which row next ---------------------------------------------------------------------
    def next(self) -> Candidate | None:
        open_ = [i for i, c in enumerate(self.candidates) if c.text not in self.skipped]
        if not open_:
            return None
        states = self._features()
        if self._diverse_phase():
            return self.candidates[self._most_diverse(open_, states)]
        return self.candidates[self._most_uncertain(open_, states)]

    def _diverse_phase(self) -> bool:
        if self.function.probe_kind == "number":
            return True
        counts: dict[str, int] = {}
        for item in self.labelled:
            counts[repr(item.label)] = counts.get(repr(item.label), 0) + 1
        answers = len(self.task.labels) if self.function.probe_kind == "classes" else 2
        return len(counts) < answers or min(counts.values()) < DIVERSE_PER_ANSWER

    def _features(self) -> np.ndarray | None:
        """Every candidate's and labelled row's state, standardised over them (None: no states)."""
        if not self.candidates or any(c.answer.state is None for c in self.candidates):
            return None
        x = unpack_states([c.answer.state for c in self.candidates]).astype(np.float64)
        return (x - x.mean(axis=0)) / np.maximum(x.std(axis=0), 1e-3)

    def _labelled_features(self, states: np.ndarray) -> np.ndarray:
        """The labelled rows' standardised states (those among the candidates' statistics)."""
        template = self.node.call.template
        answers = [self.answers.get(template.render(list(l.values))) for l in self.labelled]
        found = [a.state for a in answers if a is not None and a.state is not None]
        if not found:
            return np.zeros((0, states.shape[1]))
        raw = unpack_states([c.answer.state for c in self.candidates]).astype(np.float64)
        mean, spread = raw.mean(axis=0), np.maximum(raw.std(axis=0), 1e-3)
        return (unpack_states(found).astype(np.float64) - mean) / spread

    def _most_diverse(self, open_: list[int], states: np.ndarray | None) -> int:
        """The open candidate farthest from every labelled row (the one nearest the pool's centre
        when none is labelled); without states, the first in the pool's seeded order."""
        if states is None:
            return open_[0]
        chosen = self._labelled_features(states)
        points = states[open_]
        if len(chosen) == 0:
            return open_[int(np.argmin(np.linalg.norm(points, axis=1)))]
        distance = np.min(np.linalg.norm(points[:, None, :] - chosen[None, :, :], axis=2), axis=1)
        return open_[int(np.argmax(distance))]

    def _most_uncertain(self, open_: list[int], states: np.ndarray | None) -> int:
        """The open candidate nearest the current rule's boundary."""
        rule, _ = self.rule()
        margins = []
        for i in open_:
            answer = self.candidates[i].answer
            margins.append(self._margin(rule, answer))
        return open_[int(np.argmin(margins))]

    def _margin(self, rule: Decision | None, answer: Answer) -> float:
        """How far an answer is from changing under `rule`: the probe's top-two score gap, or
        the log-odds of P(Yes) from the threshold (the likeliest label: from an even split)."""
        if rule is not None and rule.probe is not None:
            probe = rule.probe
            scores = unpack_states([answer.state]).astype(np.float64) @ probe.matrix().T + np.asarray(probe.intercepts)
            values = np.sort(scores[0])
            return float(abs(values[0])) if len(values) == 1 else float(values[-1] - values[-2])
        logprobs = list(answer.logprobs or ())
        if rule is not None and rule.offsets is not None:
            logprobs = [lp + o for lp, o in zip(logprobs, rule.offsets)]
        if self.function.p_yes(logprobs) is not None:
            threshold = rule.threshold if rule is not None and rule.threshold is not None else 0.5
            p = self.function.p_yes(logprobs)
            return abs(_logit(p) - _logit(threshold))
        top = sorted(logprobs, reverse=True)
        return top[0] - top[1] if len(top) > 1 else math.inf

    # ---- labels -----------------------------------------------------------------------------
    def add(self, candidate: Candidate, label: Any) -> None:
        """Keep a label: appended to the file at once (a header first for a new file)."""
        new = not self.path.exists() or self.path.stat().st_size == 0
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", newline="", encoding="utf-8") as f:
                writer = csv.writer(f)
                if new:
                    writer.writerow([*self.columns, "label"])
                writer.writerow([*candidate.values, _written(label)])
                f.flush()
                os.fsync(f.fileno())
        except OSError as err:
            raise LabelError(f"cannot write the labels file {self.path}: {err.strerror or err}") from None
        self.labelled.append(Labelled(candidate.values, label))
        self.candidates.remove(candidate)

    def skip(self, candidate: Candidate) -> None:
        self.skipped.add(candidate.text)

    def rule(self) -> tuple[Decision | None, dict | None]:
        """The rule the labels so far choose, and its report (None, None before every answer has
        two labels): what the query's run would choose from this file."""
        if (self.function.probe_kind != "number" and self._diverse_phase()) or len(self.labelled) < 4:
            return None, None
        template = self.node.call.template
        answers = [self.answers.get(template.render(list(l.values))) for l in self.labelled]
        if any(a is None or a.logprobs is None for a in answers):
            return None, None
        states = [a.state for a in answers] if self.con.session.reads_states() else None
        try:
            rule, report = self.function.learn(self.task, [a.logprobs for a in answers], [l.label for l in self.labelled], states)
        except ValueError:
            return None, None
        report["per_label"] = _per_label([l.label for l in self.labelled])
        return rule, report

    def parse(self, text: str) -> Any:
        """A typed answer as the function's label (ValueError: not one)."""
        text = text.strip()
        if self.function.name == "CLASSIFY":
            if text.isdigit() and 1 <= int(text) <= len(self.task.labels):
                return self.task.labels[int(text) - 1]
            return self.function.example_label(self.task, text)
        if self.function.name == "SCORE":
            try:
                return self.function.example_label(self.task, float(text))
            except ValueError:
                raise ValueError(f"a number from {self.task.labels[0]} to {self.task.labels[-1]}") from None
        return self.function.example_label(self.task, text)

    def choices(self) -> str:
        """What a label may be, for the prompt line."""
        if self.function.name == "SCORE":
            return f"a number from {self.task.labels[0]} to {self.task.labels[-1]}"
        if self.function.name == "CLASSIFY":
            return ", ".join(f"{i} = {label}" for i, label in enumerate(self.task.labels, 1))
        return "y = true, n = false"

    def the_model_says(self, candidate: Candidate) -> str:
        """The current rule's answer for a row, as a user reads it."""
        rule, _ = self.rule()
        task = dataclasses.replace(self.task, decision=rule)
        value = self.function.value_from_answer(task, candidate.answer)
        p = self.function.p_yes(candidate.answer.logprobs) if candidate.answer.logprobs else None
        shown = str(value).lower() if isinstance(value, bool) else (f"{value:.2f}" if isinstance(value, float) else str(value))
        return shown + (f" (P(Yes) {p:.2f})" if p is not None else "")


def run_loop(labelling: Labelling, read: Callable[[str], str | None], say: Callable[[str], None], count: int | None = None) -> int:
    """Ask for labels until `count` are given, the rows run out, or the reader says stop (None:
    end of input; 'q'). Returns how many labels this session added."""
    from aisql.executor.report.signals import examples_line

    added = 0
    while count is None or added < count:
        candidate = labelling.next()
        if candidate is None:
            say(f"no more rows to label among the {labelling.pool:,} candidates")
            break
        say("")
        say(f"[{len(labelling.labelled) + 1}] {labelling.node.id} asks: {candidate.text}")
        say(f"    the model says: {labelling.the_model_says(candidate)}")
        while True:
            reply = read(f"label ({labelling.choices()}; s = skip, q = quit): ")
            if reply is None or reply.strip().lower() in ("q", "quit"):
                return added
            if reply.strip().lower() in ("s", "skip"):
                labelling.skip(candidate)
                break
            try:
                label = labelling.parse(reply)
            except ValueError as err:
                say(f"not a label: {err}")
                continue
            labelling.add(candidate, label)
            added += 1
            _, report = labelling.rule()
            if report is not None:
                say(f"    {examples_line(report)}")
            break
    return added


def _resolve(written: str, query_dir: Path | None) -> Path:
    """Where DuckDB finds the file a query names: the current directory, then the query's own."""
    path = Path(written).expanduser()
    if path.is_absolute() or path.exists() or query_dir is None:
        return path
    beside = query_dir / path
    return beside


def _written(label: Any) -> str:
    if isinstance(label, bool):
        return "true" if label else "false"
    if isinstance(label, float) and label.is_integer():
        return str(int(label))
    return str(label)


def _per_label(labels: Sequence[Any]) -> dict:
    counts: dict[str, int] = {}
    for label in labels:
        key = str(label).lower() if isinstance(label, bool) else str(label)
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def _logit(p: float) -> float:
    p = min(max(p, 1e-9), 1 - 1e-9)
    return math.log(p / (1 - p))
