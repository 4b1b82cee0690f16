"""Argument rules shared by the AI functions, for SQL literals and for runtime values alike.

The binder reads literals out of the AST (`literal_value`) and the DuckDB functions of
`aisql.register` receive values from DuckDB; both pass them through the same checks here, so a
label list or a token budget is valid in one place exactly when it is valid in the other.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from sqlglot import exp

from aisql.errors import BindError

MAX_MAX_TOKENS = 8192
HINT_KEYS = {"selectivity", "anchor", "recall", "precision", "delta", "sample", "seed", "min_confidence", "proxy", "sampling", "calibration", "join"}
CALIBRATIONS = ("none", "content_free", "batch")  # aisql.functions.decision
APPROXIMATE_KEYS = ("recall", "precision", "delta", "sample", "seed", "proxy", "sampling", "join")  # approximate mode's options (AI.IF)


def literal_value(node: exp.Expression) -> Any:
    """The Python value of a literal (string, number, negated number); None for anything else."""
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        inner = literal_value(node.this)
        return -inner if isinstance(inner, (int, float)) else None
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = node.this
        try:
            return int(text)
        except ValueError:
            try:
                return float(text)
            except ValueError:
                return None
    return None


_NOT_CONSTANT = object()


def constant_value(node: exp.Expression) -> Any:
    """The Python value of a constant written in SQL: literals, struct / object literals (a dict,
    keys as written), arrays (a list), TRUE/FALSE/NULL, a JSON string (parsed). `NOT_CONSTANT`
    for anything else (a column, a call)."""
    import json

    if isinstance(node, exp.Struct):
        out = {}
        for item in node.expressions:
            if isinstance(item, exp.Alias):  # BigQuery: STRUCT('a' AS label)
                name, value = item.alias, constant_value(item.this)
            elif isinstance(item, (exp.PropertyEQ, exp.Slice, exp.Kwarg, exp.EQ)):
                key = item.this
                name = key.this if isinstance(key, exp.Literal) else key.name
                value = constant_value(item.expression)
            else:
                return NOT_CONSTANT
            if value is NOT_CONSTANT:
                return NOT_CONSTANT
            out[name] = value
        return out
    if isinstance(node, (exp.Array, exp.Tuple)):
        values = [constant_value(item) for item in node.expressions]
        return NOT_CONSTANT if any(v is NOT_CONSTANT for v in values) else values
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, (exp.ParseJSON, exp.JSON)) or (isinstance(node, exp.Cast) and node.to.is_type("json")):
        text = literal_value(node.this)
        if isinstance(text, str):
            try:
                return json.loads(text)
            except ValueError:
                return NOT_CONSTANT
    value = literal_value(node)
    return NOT_CONSTANT if value is None else value


NOT_CONSTANT = _NOT_CONSTANT

# How a constant expression's value is computed at bind time (labels from an expression or a
# subquery): set by a run or explain to the user's DuckDB connection; else a fresh in-memory one.
CONSTANTS: ContextVar[Callable[[str], Any] | None] = ContextVar("aisql_constants", default=None)


# Tables the script's earlier statements write (name -> the statement's number), while a script is
# bound: a constant computed at bind time must not read them (it would see them as they were
# before the script ran).
WRITTEN_BEFORE: ContextVar[dict[str, int] | None] = ContextVar("aisql_written_before", default=None)

# The AI calls of a statement are UDFs of this prefix by the time its constants are computed.
_BOUND_CALL_PREFIX = "__aisql_"


@contextmanager
def constants_from(evaluate: Callable[[str], Any]):
    token = CONSTANTS.set(evaluate)
    try:
        yield
    finally:
        CONSTANTS.reset(token)


def _reads_the_row(column: exp.Column, root: exp.Expression) -> bool:
    """Is `column` a column of the row (not one of a subquery inside `root`)?"""
    parent = column.parent
    while parent is not None and parent is not root:
        if isinstance(parent, exp.Select):
            return False
        parent = parent.parent
    return True


def evaluate_constant(spelling: str, node: exp.Expression, what: str) -> Any:
    """The value of `node`, an expression that does not depend on the row (a function of
    constants, or a scalar subquery), computed once by DuckDB at bind time."""
    import duckdb

    if not isinstance(node, exp.Subquery) and any(_reads_the_row(column, node) for column in node.find_all(exp.Column)):
        hint = "a list, a constant expression, or a scalar subquery"
        if what in ("labels", "categories"):  # one label set per node; DuckDB's function reads a list per row
            hint += "; for labels that differ by row, the DuckDB function ai_classify(text, labels) (aisql.register) takes a list per row"
        raise BindError(f"{spelling}: the {what} must be the same for every row, got {node.sql(dialect='duckdb')}", hint=hint)
    _refuse_ai_calls(spelling, node, what)
    _refuse_tables_written_before(spelling, node, what)
    sql = node.sql(dialect="duckdb")
    evaluate = CONSTANTS.get() or (lambda text: duckdb.connect().execute("SELECT " + text).fetchone()[0])
    try:
        return evaluate(sql)
    except duckdb.Error as err:
        raise BindError(
            f"{spelling}: cannot compute the {what} {sql}: {str(err).splitlines()[0]}",
            hint="they are computed before the script runs: a subquery reads tables that exist then",
        ) from None


def _refuse_ai_calls(spelling: str, node: exp.Expression, what: str) -> None:
    """An AI call inside a constant (labels from a subquery that asks the model) cannot be
    computed before the query's AI calls run: refused in the user's words, not the UDF's name."""
    for call in node.find_all(exp.Anonymous):
        name = str(call.this)
        if name.lower().startswith(_BOUND_CALL_PREFIX):
            written = call.meta.get("written_as") or "an AI function"
            raise BindError(
                f"{spelling}: the {what} hold an AI call ({written}); they are computed before the query's AI calls run",
                hint="compute them in an earlier run (e.g. CREATE TABLE t AS SELECT ..., AI.GENERATE(...) ...), then read t here",
            )


def _refuse_tables_written_before(spelling: str, node: exp.Expression, what: str) -> None:
    written = WRITTEN_BEFORE.get()
    if not written:
        return
    for table in node.find_all(exp.Table):
        number = written.get(table.name.lower())
        if number is not None:
            raise BindError(
                f"{spelling}: the {what} read table {table.name!r}, which statement {number} of this script changes; "
                f"they are computed before the script runs and would see it as it was",
                hint="run the statements that change it first (an earlier aisql run), or write the values in the call",
            )


def check_labels(spelling: str, labels: Sequence[str | None]) -> tuple[str, ...]:
    """At least two labels, none NULL, empty or repeated."""
    seen: list[str] = []
    for label in labels:
        if label is None:
            raise BindError(f"{spelling}: a label is NULL in {shown_list(labels)}")
        if not label.strip():
            raise BindError(f"{spelling}: a label is empty")
        if label in seen:
            raise BindError(f"{spelling}: label {label!r} appears twice")
        seen.append(label)
    if len(seen) < 2:
        raise BindError(f"{spelling}: needs at least two labels, got {len(seen)}")
    return tuple(seen)


def check_max_tokens(spelling: str, value: Any, written: str | None = None) -> int:
    """An integer from 1 to MAX_MAX_TOKENS."""
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_MAX_TOKENS:
        shown = written if written is not None else repr(value)
        raise BindError(f"{spelling}: max_tokens must be an integer between 1 and {MAX_MAX_TOKENS}, got {shown}")
    return value


def read_max_tokens(spelling: str, node: exp.Expression) -> int:
    return check_max_tokens(spelling, literal_value(node), node.sql(dialect="duckdb"))


def read_hints(spelling: str, node: exp.Expression) -> dict[str, Any]:
    """The planner hints struct: `{'selectivity': 0.1, 'anchor': 'c'}`."""
    if not isinstance(node, exp.Struct):
        raise BindError(f"{spelling}: options must be a struct literal like {{'selectivity': 0.1}}")
    hints: dict[str, Any] = {}
    for item in node.expressions:
        if not isinstance(item, (exp.PropertyEQ, exp.Slice, exp.Kwarg)):
            raise BindError(f"{spelling}: options must be key: value pairs")
        key = item.this.name.lower()
        if key not in HINT_KEYS:
            raise BindError(f"{spelling}: unknown option {key!r}", hint=f"known options: {', '.join(sorted(HINT_KEYS))}")
        value = literal_value(item.expression)
        if key == "selectivity" and not (isinstance(value, (int, float)) and 0.0 <= float(value) <= 1.0):
            raise BindError(f"{spelling}: option 'selectivity' must be a number between 0 and 1")
        if key == "min_confidence" and not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 < float(value) < 1.0):
            raise BindError(f"{spelling}: option 'min_confidence' must be a number between 0 and 1 (exclusive), e.g. 0.8")
        if key == "calibration" and value not in CALIBRATIONS:
            raise BindError(f"{spelling}: option 'calibration' must be one of {', '.join(repr(c) for c in CALIBRATIONS)}, got {item.expression.sql(dialect='duckdb')}")
        if key == "anchor" and not isinstance(value, str):
            raise BindError(f"{spelling}: option 'anchor' must be a table alias in quotes")
        problem = target_problem(key, value) if key in APPROXIMATE_KEYS else None
        if problem:
            raise BindError(f"{spelling}: option {problem}")
        hints[key] = float(value) if key in ("selectivity", "recall", "precision", "delta", "min_confidence") else value
    return hints


LITERAL_EXAMPLES = "SELECT UNNEST(__aisql_examples, recursive := true)"  # a list of structs, as a query


def read_examples(spelling: str, node: exp.Expression) -> str:
    """`examples => (SELECT ...)` or `examples => [{'col': ..., 'label': ...}, ...]`: the labelled
    examples as one DuckDB query (its columns named like the prompt's placeholders, plus
    `label`), run when the call's node starts (aisql.executor.node.decisions)."""
    hint = "e.g. examples => (SELECT review, label FROM labelled), [{'review': 'Loved it', 'label': TRUE}] or [('Loved it', TRUE)]"
    _refuse_ai_calls(spelling, node, "examples")  # labels the model would have to answer first
    if isinstance(node, exp.Subquery):
        node = node.this
    if isinstance(node, exp.Query):
        return node.sql(dialect="duckdb")
    if isinstance(node, exp.Array):
        if not node.expressions:
            raise BindError(f"{spelling}: examples => [] holds no example", hint=hint)
        if all(isinstance(item, exp.Tuple) for item in node.expressions):  # BigQuery's pairs: [('input', 'label'), ...]
            node = exp.Array(expressions=[_pair_as_struct(spelling, item, hint) for item in node.expressions])
        for item in node.expressions:
            if not isinstance(item, exp.Struct):
                raise BindError(f"{spelling}: each example must be a struct like {{'review': '...', 'label': TRUE}}, got {item.sql(dialect='duckdb')}", hint=hint)
            keys = [pair.this.name.lower() for pair in item.expressions if isinstance(pair, (exp.PropertyEQ, exp.Slice, exp.Kwarg))]
            if "label" not in keys:
                raise BindError(f"{spelling}: an example has no 'label': {item.sql(dialect='duckdb')}", hint=hint)
        return f"{LITERAL_EXAMPLES} FROM (SELECT {node.sql(dialect='duckdb')} AS __aisql_examples)"
    raise BindError(f"{spelling}: examples must be a query in parentheses or a list of structs, got {node.sql(dialect='duckdb')}", hint=hint)


def _pair_as_struct(spelling: str, pair: exp.Tuple, hint: str) -> exp.Struct:
    """BigQuery's example `('input text', 'label')` as the struct {'input': ..., 'label': ...}."""
    if len(pair.expressions) != 2:
        raise BindError(f"{spelling}: an example pair is (input, label), got {pair.sql(dialect='duckdb')}", hint=hint)
    value, label = pair.expressions
    return exp.Struct(expressions=[exp.PropertyEQ(this=exp.to_identifier("input"), expression=value.copy()), exp.PropertyEQ(this=exp.to_identifier("label"), expression=label.copy())])


# An AI join's strategy (aisql.executor.joins.join_rewrite): 'auto' chooses per join, 'exact' asks every
# pair even under --approximate, 'classify' lists the smaller side once per row, 'embed' scores
# pairs by their sides' embeddings, 'proxy' is the per-pair cascade every approximate AI.IF runs.
JOIN_STRATEGIES = ("auto", "exact", "classify", "embed", "proxy")
SAMPLINGS = ("auto", "progressive", "uniform", "importance")  # how the oracle's sample is drawn (aisql.executor.approximate.score_first)
SEED_MAX = 2**32 - 1  # the proxy's trainer (scikit-learn's random_state) takes seeds up to this


def target_problem(key: str, value: Any) -> str | None:
    """What is wrong with one approximate-mode target (None: fine). Checked where the value is
    given (a call's options, the run's --approximate; aisql.planner.approximation.Targets), before any prompt is paid for."""
    if key in ("recall", "precision", "delta"):
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 < float(value) < 1.0):
            return f"{key!r} must be a number between 0 and 1 (exclusive), got {value!r}"
    elif key == "sample":
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
            return f"'sample' must be a whole number, 0 or more, got {value!r}"
    elif key == "seed":
        if not (isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= SEED_MAX):
            return f"'seed' must be a whole number from 0 to {SEED_MAX} (2^32-1), got {value!r}"
    elif key == "proxy":
        if not (isinstance(value, str) and value.strip()):
            return f"'proxy' must be a model name in quotes ('smollm2', a .gguf path, 'embeddings' or 'auto'), got {value!r}"
    elif key == "join":
        if value not in JOIN_STRATEGIES:
            return f"'join' must be one of {', '.join(repr(v) for v in JOIN_STRATEGIES)}, got {value!r}"
    elif key == "sampling":
        if value not in SAMPLINGS:
            return f"'sampling' must be one of {', '.join(repr(v) for v in SAMPLINGS)}, got {value!r}"
    return None


# ---- the vendors' named arguments -------------------------------------------------------------
# BigQuery's AI functions carry arguments that name its cloud plumbing; a query ported verbatim
# keeps them. Each is accepted where it means something here, ignored with one note where it
# names plumbing, and anything else is an error naming it (in `AIFunction.bind_arguments`).
PLUMBING = {
    "connection_id": "a BigQuery connection; aisql runs its own model",
    "request_type": "a Vertex AI quota type",
    "embeddings": "embeddings for BigQuery's optimized mode; aisql evaluates every row with its model",
    "optimization_mode": "BigQuery's optimized mode; aisql evaluates every row with its model",
    "max_error_ratio": "BigQuery's tolerance for failed rows; aisql fails the query on an error",
}
OPTIMIZED = ("embeddings", "optimization_mode")  # BigQuery's optimized mode: approximate mode where a function has one
GENERATION_CONFIG_KEYS = {"max_output_tokens", "temperature", "thinking_config", "top_p", "top_k", "candidate_count", "seed"}


@dataclass(frozen=True)
class VendorArguments:
    """What a call's vendor arguments mean here: the model it names, a token budget, notes."""

    endpoint: str | None = None
    max_output_tokens: int | None = None
    notes: tuple[str, ...] = ()
    sampling: dict = field(default_factory=dict)  # temperature / top_p / seed for functions that sample
    approximate: bool = False  # BigQuery's optimized mode asked for (optimization_mode, embeddings)


def read_vendor_arguments(spelling: str, named: dict[str, exp.Expression], samples: bool = False, approximates: bool = False) -> VendorArguments:
    """Take BigQuery's named arguments out of `named` (in place). `samples`: the function takes
    temperature / top_p / seed, which `model_params.generation_config` may then give.
    `approximates`: it has an approximate mode, which BigQuery's optimized mode turns on."""
    notes: list[str] = []
    endpoint = max_output_tokens = None
    sampling: dict[str, exp.Expression] = {}
    approximate = False
    if approximates:
        if "optimization_mode" in named:
            node = named.pop("optimization_mode")
            mode = literal_value(node)
            if not isinstance(mode, str) or mode.upper() != "MINIMIZE_COST":
                raise BindError(f"{spelling}: optimization_mode must be 'MINIMIZE_COST', got {node.sql(dialect='duckdb')}", hint="leave it out for exact answers")
            approximate = True
        if "embeddings" in named:  # BigQuery: MINIMIZE_COST is the default when embeddings are given
            named.pop("embeddings")
            approximate = True
            notes.append(f"{spelling}: embeddings => not read (aisql's proxy embeds the prompt with its embedding model)")
    for key, meaning in PLUMBING.items():
        if key in named:
            named.pop(key)
            notes.append(f"{spelling}: {key} ignored ({meaning})")
    if "endpoint" in named:
        node = named.pop("endpoint")
        endpoint = literal_value(node)
        if not isinstance(endpoint, str) or not endpoint.strip():
            raise BindError(f"{spelling}: endpoint must be a model name in quotes, got {node.sql(dialect='duckdb')}")
    if "model_params" in named:
        params = _json_argument(spelling, "model_params", named.pop("model_params"))
        ignored: dict[str, list[str]] = {}  # why -> the keys ignored for it (one note per reason)
        for key, value in params.items():
            if key != "generation_config":
                ignored.setdefault("not a generation setting", []).append(f"model_params.{key}")
                continue
            if not isinstance(value, dict):
                raise BindError(f"{spelling}: model_params.generation_config must be a JSON object")
            for setting, setting_value in value.items():
                if setting == "max_output_tokens":
                    max_output_tokens = check_max_tokens(spelling, setting_value)
                elif setting == "temperature" and setting_value in (0, 0.0):
                    pass  # aisql decodes greedily: temperature 0 is what it does
                elif samples and setting in ("temperature", "top_p", "seed") and isinstance(setting_value, (int, float)) and not isinstance(setting_value, bool):
                    sampling[setting] = exp.Literal.number(setting_value)
                elif setting in GENERATION_CONFIG_KEYS:
                    ignored.setdefault("aisql answers deterministically, greedy", []).append(f"model_params.generation_config.{setting}")
                else:
                    ignored.setdefault("unknown setting", []).append(f"model_params.generation_config.{setting}")
        for why, keys in ignored.items():
            notes.append(f"{spelling}: {_some(keys)} ignored ({why})")
    return VendorArguments(endpoint, max_output_tokens, tuple(notes), sampling, approximate)


def _some(names: Sequence[str], shown: int = 5) -> str:
    """A few names and how many more: one note line however many keys a query gives."""
    head = ", ".join(names[:shown])
    return head if len(names) <= shown else f"{head} and {len(names) - shown} more"


def _json_argument(spelling: str, name: str, node: exp.Expression) -> dict:
    """A JSON object written in SQL: `JSON '{...}'`, a string literal, or a cast of one."""
    import json

    inner = node
    if isinstance(inner, (exp.ParseJSON, exp.Cast, exp.JSONExtract)) or (isinstance(inner, exp.Anonymous) and inner.name.upper() == "JSON"):
        inner = inner.this if not isinstance(inner, exp.Anonymous) else (inner.expressions[0] if inner.expressions else None)
    text = literal_value(inner) if inner is not None else None
    if not isinstance(text, str):
        raise BindError(f"{spelling}: {name} must be a JSON literal, e.g. JSON '{{\"generation_config\": {{\"temperature\": 0}}}}'")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise BindError(f"{spelling}: {name} is not valid JSON ({err.msg} at character {err.pos})") from None
    except RecursionError:
        raise BindError(f"{spelling}: {name} is nested too deeply to read", hint="it takes {\"generation_config\": {...}}: two levels") from None
    if not isinstance(value, dict):
        raise BindError(f"{spelling}: {name} must be a JSON object")
    return value


def read_sampling(spelling: str, named: dict[str, exp.Expression]) -> tuple[float, float, int] | None:
    """temperature => t, top_p => p, seed => n (named, in place); None for greedy (temperature 0)."""
    values = {}
    for key in ("temperature", "top_p", "seed"):
        node = named.pop(key, None)
        if node is None:
            continue
        value = literal_value(node)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise BindError(f"{spelling}: {key} must be a number, got {node.sql(dialect='duckdb')}")
        values[key] = value
    temperature = float(values.get("temperature", 0.0))
    top_p = float(values.get("top_p", 1.0))
    seed = values.get("seed", 0)
    if not 0.0 <= temperature <= 2.0:
        raise BindError(f"{spelling}: temperature must be between 0 and 2, got {temperature:g}")
    if not 0.0 < top_p <= 1.0:
        raise BindError(f"{spelling}: top_p must be in (0, 1], got {top_p:g}")
    if not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise BindError(f"{spelling}: seed must be an integer from 0 to 2^63-1, got {seed!r}")
    return None if temperature == 0 else (temperature, top_p, seed)


SHOWN_LABELS = 10  # labels a plan or a summary line shows; the rest are counted


def shown_list(values: Sequence[str | None]) -> str:
    """A list as a plan line shows it: the first few, then how many more (10,000 labels are
    10,000 labels in the model's prompt, never in a summary line)."""
    if len(values) <= SHOWN_LABELS + 2:
        return repr(list(values))
    return repr(list(values[:SHOWN_LABELS]))[:-1] + f", ... and {len(values) - SHOWN_LABELS:,} more]"
