"""What an AI function is, in one place: read by the binder, the planner, the executor and the
DuckDB functions of `aisql.register`.

An `AIFunction` declares
- its spellings (BigQuery's dotted `AI.IF`, Snowflake's `AI_FILTER`, ...) and sqlglot's own node
  classes for it, for the binder;
- its argument rules: `read_options` for SQL literals, `options_from_values` for the values
  DuckDB hands a registered function — both end in the same checks (`aisql.functions.arguments`);
- its result type in SQL and Arrow;
- what it asks the model: a `Task` (the framing around the prompt — system message, suffix,
  the start of the answer —; labels to score or a token budget) and which engine request carries it;
- how the engine's answer becomes the SQL value.

The engine never sees these objects: the executor turns a Task into engine requests. The front
end reads only the spellings and argument rules, never a model.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

from sqlglot import exp

from aisql.engine.model.prompt_format import Framing
from aisql.errors import BindError
from aisql.functions import arguments
from aisql.functions import decision, learning
from aisql.functions.decision import Decision


class Stale:
    """A cached answer that lacks what this task's rule needs (Task.read): a miss, replaced when answered."""

    def __repr__(self) -> str:
        return "STALE"


STALE = Stale()


class Request(enum.Enum):
    """The engine request a function's prompts become."""

    SCORE = "score"  # label continuations scored in one forward pass (ScoreRequest)
    GENERATE = "generate"  # greedy decoding (GenerateRequest)
    EMBED = "embed"  # one vector per text from the embedding model (aisql.engine.backends.embedding)
    AGGREGATE = "aggregate"  # a group's values reduced by map-reduce over GENERATE prompts


@dataclass(frozen=True)
class Options:
    """A call's function-specific options, after the argument rules (none for the base)."""


@dataclass(frozen=True)
class DuckDBParameter:
    """An argument of the function `aisql.register` puts on a DuckDB connection (after the prompt)."""

    name: str
    sql_type: str
    default: str | None = None  # a SQL literal: the macro's default value


@dataclass(frozen=True, eq=False)
class Task:
    """What the model is asked, per prompt text, for one AI call: the framing around the text
    (aisql.engine.model.prompt_format.Framing), labels to score or a token budget.

    Two tasks with the same signature give the same answer to the same prompt: the signature,
    with the model's fingerprint, is where the result cache keeps the answers. Every part of
    the framing is in it, so answers asked another way are never served."""

    function: "AIFunction"
    framing: Framing
    labels: tuple[str, ...] = ()
    max_tokens: int | None = None
    grammar: str | None = None  # GENERATE only: decode a literal of this type ('int', 'double', 'bool')
    sampling: tuple[float, float, int] | None = None  # GENERATE only: (temperature, top_p, seed); None: greedy
    instruction: str | None = None  # AGGREGATE only: the user's task description (AI_AGG's second argument)
    stage: bool = False  # an aggregate's map or reduce prompts: GENERATE requests (no instruction: its own key)
    # SCORE tasks: the rule from label probabilities to the value (aisql.functions.decision) —
    # min_confidence, fitted on examples, or a calibration; None: the function's own. Not part
    # of the signature: the cache keeps raw probabilities and every reader applies its rule.
    decision: Decision | None = None

    @property
    def signature(self) -> str:
        framing = self.framing
        parts = [self.function.name, framing.system if framing.system is not None else "\x00model default", *self.labels, str(self.max_tokens)]
        if framing != Framing(system=framing.system):  # framings beyond a system message; a plain one keeps its older key (tests/test_cache_keys.py)
            parts += ["framing-v2", framing.suffix, framing.answer_prefix, framing.label_prefix]
        if self.grammar is not None:
            parts += ["grammar", self.grammar]
        if self.sampling is not None:
            parts += ["sampling", *map(repr, self.sampling)]
        if self.instruction is not None:
            parts += ["instruction", self.instruction]
        payload = "\x1f".join(parts)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    @property
    def keeps_states(self) -> bool:
        """Its prompts' hidden states are kept with their answers (labelled examples: Decision.keep_states)."""
        return self.decision is not None and self.decision.keep_states

    @property
    def returns_states(self) -> bool:
        """Its answers are read back with their hidden states (the examples a rule is fitted on);
        everyone else's answers leave them in the result cache."""
        return self.decision is not None and self.decision.fitting and self.decision.keep_states

    def accepts(self, value: Any) -> bool:
        """Whether `value` is an answer this task can have (aisql.executor.store.cache reads an entry
        that is not as a miss: edited by hand or corrupt, it is asked again)."""
        return self.function.accepts_value(self, value)

    def read(self, answer: Any) -> Any:
        """A stored answer (aisql.executor.store.answer_store.Answer) as this task answers it: a scored answer's value decided again from
        its label probabilities by this task's rule; None for an entry this task never answers
        with (edited or corrupt: asked again and replaced); STALE for an older entry without the
        probabilities a non-default rule needs (asked again and replaced, not an error)."""
        if self.request is not Request.SCORE:
            return answer if self.accepts(answer.value) else None
        if answer.logprobs is not None and len(answer.logprobs) != len(self.labels):
            return None
        if answer.logprobs is None and not self.accepts(answer.value):
            return None
        value = self.function.value_from_answer(self, answer)
        if value is STALE or (value == answer.value and type(value) is type(answer.value)):
            return value if value is STALE else answer
        return dataclasses.replace(answer, value=value)

    def store_key(self, model_fingerprint: str) -> str:
        """Where this task's answers live in an answer store: per model, per task."""
        return f"{model_fingerprint}/{self.signature}"

    @property
    def request(self) -> Request:
        return Request.GENERATE if self.stage else self.function.request

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Task) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple:
        return (self.function.name, self.framing, self.labels, self.max_tokens, self.grammar, self.sampling, self.instruction, self.stage, self.decision)


class AIFunction:
    """One AI function. Subclasses set the class attributes and implement the option rules."""

    name: ClassVar[str]  # canonical name, e.g. "IF"; also part of the result cache key
    spellings: ClassVar[tuple[str, ...]]  # as written in SQL, e.g. ("AI.IF", "AI_FILTER", "AI_IF")
    sqlglot_nodes: ClassVar[tuple[type[exp.Expression], ...]] = ()  # sqlglot's own classes for it
    sql_type: ClassVar[str]  # DuckDB type of the result
    request: ClassVar[Request]
    is_predicate: ClassVar[bool] = False  # a TRUE answer keeps a row (in WHERE / JOIN ON it filters)
    is_aggregate: ClassVar[bool] = False  # an aggregate over a group's values (AI_AGG): never OVER (...)
    duckdb_parameters: ClassVar[tuple[DuckDBParameter, ...]] = ()  # after `prompt VARCHAR`
    signature_hint: ClassVar[str]  # how to call it, for error messages
    # 0: the first argument is a prompt (PROMPT template, parts tuple or expression); n: the
    # function compares n contents, each its own value (AI.SIMILARITY), returned as a Tuple.
    contents: ClassVar[int] = 0
    # The DuckDB function of `aisql.register`; None: not offered there (documented why).
    duckdb_name: ClassVar[str | None]
    duckdb_prompt_type: ClassVar[str] = "VARCHAR"  # its first parameter's type

    def prompt_from_value(self, value: Any) -> str | None:
        """The prompt text of a registered DuckDB function's first argument; None: the answer is
        NULL without asking (an aggregate's list with no values)."""
        return value

    # ---- arguments ---------------------------------------------------------------------------
    def bind_arguments(
        self, spelling: str, positional: list[exp.Expression], named: dict[str, exp.Expression]
    ) -> tuple[exp.Expression, Options, dict[str, Any], arguments.VendorArguments]:
        """Validate a call's arguments: (the prompt expression, the options, the planner hints,
        what the vendor's named arguments mean here).

        Every function takes the prompt first (or `prompt => ...`) and may end with an options
        struct of planner hints (`{'selectivity': 0.1}`); what lies between is the function's own
        (`read_options`); BigQuery's named arguments (`connection_id`, `endpoint`, `model_params`,
        ...) are read by `arguments.read_vendor_arguments`.
        """
        positional, named = list(positional), dict(named)
        if not positional and "prompt" in named:  # BigQuery: `prompt => ...`
            positional.append(named.pop("prompt"))
        if not positional:
            raise BindError(f"{spelling} needs a prompt argument", hint=f"e.g. {self.signature_hint}")
        prompt = positional.pop(0)
        vendor = arguments.read_vendor_arguments(spelling, named, samples=self.samples, approximates=self.approximates)
        for key, value in vendor.sampling.items():
            named.setdefault(key, value)
        if vendor.max_output_tokens is not None:
            if self.takes_max_tokens and "max_tokens" not in named:
                named["max_tokens"] = exp.Literal.number(vendor.max_output_tokens)
            elif not self.takes_max_tokens:
                note = f"{spelling}: model_params.generation_config.max_output_tokens ignored (answered in one forward pass, no decoding)"
                vendor = dataclasses.replace(vendor, notes=vendor.notes + (note,))
        options = self.read_options(spelling, positional, named)
        examples = named.pop("examples", None)  # after the options: a vendor's config object may hold them (Snowflake's AI_CLASSIFY)
        hints = self.read_hints_and_finish(spelling, positional, named)
        options = self.options_from_hints(spelling, options, hints)
        if any(key in hints for key in arguments.APPROXIMATE_KEYS) and not self.approximates:
            raise BindError(f"{spelling} has no approximate mode (AI.IF has): recall / precision / delta do not apply")
        if vendor.approximate:
            hints["approximate"] = True
        self.read_decision(spelling, examples, options, hints)
        return prompt, options, hints, vendor

    def read_decision(self, spelling: str, examples: exp.Expression | None, options: Options, hints: dict[str, Any]) -> None:
        """Labelled examples and a calibration (aisql.functions.decision), into `hints`: what the
        executor asks before the node's prompts. One source of the rule at a time."""
        calibration = hints.get("calibration")
        if calibration == "none":
            hints.pop("calibration")
            calibration = None
        if examples is None and calibration is None:
            return
        if not self.decides:
            given = "examples" if examples is not None else "option 'calibration'"
            raise BindError(f"{spelling} takes no {given}: it applies to functions that score labels (AI.IF, AI.CLASSIFY, AI.SCORE)")
        if examples is not None:
            if calibration is not None:
                raise BindError(f"{spelling}: give examples or a calibration, not both (the examples' rule includes any calibration)")
            hints["examples"] = arguments.read_examples(spelling, examples)
        if getattr(options, "min_confidence", None) is not None:
            raise BindError(f"{spelling}: min_confidence sets the decision itself; leave it out with {'examples' if examples is not None else 'a calibration'}")

    def options_from_hints(self, spelling: str, options: Options, hints: dict[str, Any]) -> Options:
        """Options written in the hints struct that change answers, not plans (AI.IF's
        min_confidence): taken out of `hints` into the options. Other functions refuse them."""
        if "min_confidence" in hints:
            raise BindError(f"{spelling}: option 'min_confidence' is AI.IF's (a threshold on P(Yes))")
        return options

    def read_hints_and_finish(self, spelling: str, positional: list[exp.Expression], named: dict[str, exp.Expression]) -> dict[str, Any]:
        """The planner hints struct that may end a call, then nothing may be left over."""
        hints_node = named.pop("options", None)
        if hints_node is None and positional and isinstance(positional[0], exp.Struct):
            hints_node = positional.pop(0)
        hints = arguments.read_hints(spelling, hints_node) if hints_node is not None else {}
        if positional:
            raise BindError(f"{spelling}: too many arguments ({positional[0].sql(dialect='duckdb')!s} is not expected)", hint=f"e.g. {self.signature_hint}")
        if named:
            raise BindError(f"{spelling}: unknown argument {next(iter(named))!r}", hint=f"e.g. {self.signature_hint}")
        return hints

    samples: ClassVar[bool] = False  # accepts temperature / top_p / seed (seeded sampling)
    approximates: ClassVar[bool] = False  # has an opt-in approximate mode (aisql.executor.approximate.cascade)

    @property
    def takes_max_tokens(self) -> bool:
        return any(p.name == "max_tokens" for p in self.duckdb_parameters)

    def read_options(self, spelling: str, positional: list[exp.Expression], named: dict[str, exp.Expression]) -> Options:
        """Take this function's own arguments out of `positional` / `named` (in place)."""
        return Options()

    def options_from_values(self, *values: Any) -> Options:
        """The same rules for the values of `duckdb_parameters` (one row of a DuckDB function)."""
        return Options()

    # ---- what the model is asked ---------------------------------------------------------------
    def task(self, options: Options) -> Task:
        raise NotImplementedError

    def output_tokens(self, options: Options) -> float:
        """Tokens decoded per prompt (an upper bound), for the cost model."""
        return 0.0

    # ---- answers ---------------------------------------------------------------------------------
    def value_from_scores(self, task: Task, logprobs: Sequence[float]) -> Any:
        """The SQL value from the labels' log-probabilities (SCORE functions)."""
        raise NotImplementedError

    def value_from_answer(self, task: Task, answer: Any) -> Any:
        """A scored answer's value under `task`'s rule (aisql.executor.store.answer_store.Answer): from
        every label's log-probability, or, under a probe, from its hidden state; without them
        (cached before they were kept) the stored value under the function's own rule, else STALE."""
        rule = task.decision
        if rule is not None and rule.needs_states and answer.state is None:
            return STALE
        if rule is not None and rule.probe is not None:
            return self.value_from_probe(task, rule.probe.predict_one(answer.state))
        if answer.logprobs is not None:
            return self.value_from_scores(task, answer.logprobs)
        return answer.value if task.decision is None else STALE

    def p_yes(self, logprobs: Sequence[float]) -> float | None:
        """A yes/no function's P(Yes) from its labels' log-probabilities (None: not yes/no)."""
        return None

    def value_from_probe(self, task: Task, prediction: Any) -> Any:
        """The SQL value from a probe's prediction (aisql.functions.probe.Probe.predict_one): the
        index of a label, or a number on AI.SCORE's scale."""
        return task.labels[prediction]

    def value_from_text(self, task: Task, text: str) -> Any:
        """The SQL value from the generated text (GENERATE functions)."""
        raise NotImplementedError

    def accepts_value(self, task: Task, value: Any) -> bool:
        """Whether `value` is one `value_from_scores` / `value_from_text` can return for `task`:
        of the function's SQL type (NULL only where a generated text may not parse)."""
        if value is None:
            return task.request in (Request.GENERATE, Request.AGGREGATE)
        return sql_value_fits(self.sql_type, value)

    # ---- the decision rule (aisql.functions.decision) ------------------------------------------
    # A function whose value is decided from label probabilities can learn its rule from
    # labelled examples and take a label-free calibration.
    decides: ClassVar[bool] = False

    def example_label(self, task: Task, value: Any) -> Any:
        """A labelled example's label as one of this function's answers; ValueError saying why not."""
        raise NotImplementedError

    def fit_decision(self, task: Task, rows: Sequence[Sequence[float]], labels: Sequence[Any]) -> Decision:
        """The rule fitted on examples' label log-probabilities (`rows`) and their labels."""
        raise NotImplementedError

    def calibrated(self, task: Task, rows: Sequence[Sequence[float]], source: str) -> Decision:
        """A label-free calibration from the label log-probabilities of its inputs."""
        return Decision(source, offsets=decision.calibration_offsets(rows))

    def example_quality(self, predicted: Sequence[Any], labels: Sequence[Any]) -> float:
        """How well answers match examples' labels, higher is better (balanced accuracy)."""
        return decision.balanced_accuracy(predicted, labels)

    quality_name: ClassVar[str] = "balanced accuracy"

    def choice_quality(self, predicted: Sequence[Any], labels: Sequence[Any]) -> float:
        """How labelled examples' rules are compared and reported (aisql.functions.learning):
        `example_quality`, unless a function ranks by another (AI.SCORE: Spearman)."""
        return self.example_quality(predicted, labels)

    @property
    def choice_name(self) -> str:
        return self.quality_name

    def learn(
        self, task: Task, rows: Sequence[Sequence[float]], labels: Sequence[Any], states: Sequence[bytes | None] | None = None
    ) -> tuple[Decision | None, dict]:
        """The rule labelled examples support, and the report of its choice (aisql.functions.learning):
        the model's own answers, a rule on the label probabilities (kept only if it does better
        held out), or a probe on the hidden states (`states`; chosen only if clearly better)."""
        return learning.learn(self, task, rows, labels, states)

    # A probe on the hidden state predicts a label index (CLASSES) or a number on the scale
    # (NUMBER) for the functions that decide (aisql.functions.probe); None: no probe.
    probe_kind: ClassVar[str | None] = "classes"

    def probe_target(self, task: Task, label: Any) -> Any:
        """An example's label as the probe's target: the label's index (AI.SCORE: the number)."""
        return task.labels.index(label)

    # ---- presentation ----------------------------------------------------------------------------
    def describe_options(self, options: Options) -> str:
        """The options as they follow the prompt in plans, e.g. `, ['a', 'b']`."""
        return ""

    @property
    def arrow_type(self):
        import pyarrow as pa

        return {"BOOLEAN": pa.bool_(), "VARCHAR": pa.string(), "DOUBLE": pa.float64(), "BIGINT": pa.int64()}[self.sql_type]

    def result_type(self, options: Options, dimension: int | None = None) -> tuple[str, "object"]:
        """(DuckDB type, Arrow type) of one call's result: the function's own, unless its options
        or the embedding model's vector size (`dimension`) shape it (a STRUCT, a FLOAT[n])."""
        return self.sql_type, self.arrow_type

    def possible_values(self, options: Options) -> tuple[Any, ...]:
        """Every value a call can answer, where they form a small closed set (AI.IF's booleans,
        AI.CLASSIFY's labels, AI.SCORE's scale ends); () where any text or number may come. The
        SQL around the call is tried on them before the first prompt (executor.node.downstream)."""
        return (True, False) if self.sql_type == "BOOLEAN" else ()

    def __repr__(self) -> str:
        return f"<AI function {self.name}>"


def sql_value_fits(sql_type: str, value: Any) -> bool:
    """Whether a (JSON-decoded) Python value is a non-NULL value of a scalar SQL type."""
    if sql_type == "BOOLEAN":
        return isinstance(value, bool)
    if sql_type == "VARCHAR":
        return isinstance(value, str)
    if sql_type == "DOUBLE":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if sql_type == "BIGINT":
        return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63
    return False


def best_label(logprobs: Sequence[float]) -> int:
    """Index of the most likely label (the first one on an exact tie)."""
    return max(range(len(logprobs)), key=logprobs.__getitem__)
