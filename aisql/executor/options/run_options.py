"""A run's options, declared once: name, default, the values each accepts, its help, where it
can be given. Every door is made from this table (vLLM's EngineArgs is the model):
- `aisql run` / `aisql explain`: a click option per entry with a `flag` (aisql.cli_options);
- the Python API (`Connection.run(**options)`, the shell): `RunRequest`, a dataclass of every
  entry, which checks each value when built;
- the DuckDB functions (`aisql.register(con, **options)`) and the dbt plugin's settings: the
  entries whose doors include "functions";
- the executor: `RunOptions` (aisql.executor.answers.answer_types) reads each option by its name.
A new run option is one entry here and the code that reads it.

A bad value is refused the same way from every door, before any prompt runs: one line naming
the option and the value given (`checkpoint_every must be a whole number, 1 or more, got
'zero'`), never a TypeError from deep inside a run, and never a silent 0 or -5.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import Any, Mapping

from aisql.errors import AisqlError
from aisql.planner.hardware import HARDWARE
from aisql.executor.options.checkpoints import DEFAULT_SECONDS
from aisql.executor.options.option_rules import OVERFLOW_MODES, OptionRule
from aisql.sql.dialect_names import DIALECTS

DEFAULT_CHECKPOINT_EVERY = 256  # prompts between two commits at most (and about DEFAULT_SECONDS of model time)

RUN = "run"  # `aisql run`, Connection.run, the shell
EXPLAIN = "explain"  # `aisql explain`
FUNCTIONS = "functions"  # aisql.register's DuckDB functions, the dbt plugin


@dataclass(frozen=True)
class RunOption:
    name: str  # the Python keyword, the RunRequest field, the DuckDB / dbt setting
    default: Any
    help: str
    rule: OptionRule | None = None  # the values it accepts (None: the reader checks them)
    flag: str | None = None  # its spelling on the command line (None: not a CLI option, or spelled by the CLI itself)
    metavar: str | None = None
    doors: tuple[str, ...] = (RUN,)


def _rule(name: str, kind: str, **limits) -> OptionRule:
    return OptionRule(name, kind, **limits)


RUN_OPTIONS: tuple[RunOption, ...] = (
    RunOption(
        "dialect", None, "The SQL dialect the script is written in: duckdb (default), bigquery, snowflake.",
        _rule("dialect", "choice", choices=DIALECTS, optional=True), doors=(RUN, EXPLAIN),
    ),
    RunOption("params", None, "Values of $1 / ? / $name parameters: a list, or a dict by name (bound as values, never pasted into SQL).", doors=(RUN, EXPLAIN)),
    RunOption("naive", False, "Evaluate row by row without any optimisation (the reference).", _rule("naive", "flag"), flag="--naive"),
    RunOption(
        "hardware", None, "Cost the run at this profile's price in --stats-json.", _rule("hardware", "choice", choices=HARDWARE, optional=True),
        flag="--hardware", doors=(RUN, EXPLAIN),
    ),
    RunOption(
        "price_per_hour", None, "Override the hardware profile's price.", _rule("price_per_hour", "amount", minimum=0, optional=True),
        flag="--price-per-hour", metavar="USD", doors=(RUN, EXPLAIN),
    ),
    RunOption(
        "max_prompts", None, "Stop before sending more than N new prompts to the model.", _rule("max_prompts", "count", minimum=0, optional=True),
        flag="--max-prompts", metavar="N",
    ),
    RunOption(
        "max_cost", None, "Stop before model time would cost more than USD (at --hardware's price).", _rule("max_cost", "amount", minimum=0, optional=True),
        flag="--max-cost", metavar="USD",
    ),
    RunOption(
        "on_overflow", "error", "A prompt longer than the model's context: fail, or cut its text.", _rule("on_overflow", "choice", choices=OVERFLOW_MODES),
        flag="--on-overflow", doors=(RUN, FUNCTIONS),
    ),
    RunOption(
        "checkpoint_every", DEFAULT_CHECKPOINT_EVERY,
        "Commit answers to the cache after at most N prompts or about 5 s of model time (the run's first chunk: 8 prompts), "
        "whichever comes first; Ctrl-C or a kill loses at most that chunk. (explain --workers: the most prompts in a shard.)",
        _rule("checkpoint_every", "count", minimum=1), flag="--checkpoint-every", metavar="N", doors=(RUN, EXPLAIN, FUNCTIONS),
    ),
    RunOption(
        "checkpoint_seconds", DEFAULT_SECONDS, "Model time between two commits, about (seconds).",
        _rule("checkpoint_seconds", "amount", minimum=0, above_minimum=True), doors=(RUN, FUNCTIONS),
    ),
    RunOption("progress", None, "Where progress goes (aisql.executor.report.progress.Progress); None: silence (the CLI draws a bar)."),
    RunOption(
        "approximate", None,
        "Approximate mode for every AI.IF (opt-in): True for the default targets, or a dict of recall / precision / delta / sample / "
        "seed / proxy (aisql.executor.approximate.cascade). Naive runs stay exact.",
    ),
    RunOption(
        "strict_models", False,
        "Refuse a query that names a model other than --model (BigQuery's endpoint =>, Snowflake's AI_COMPLETE model, FlockMTL's "
        "model_name); by default the run's model answers and a note says so.",
        _rule("strict_models", "flag"), flag="--strict-models",
    ),
    RunOption("model_map", None, "A model named in the query -> the model that answers it: a dict, or NAME=MODEL strings.", doors=(RUN, EXPLAIN)),
    RunOption("flock", None, "The FlockMTL prompts a connection keeps across runs (aisql.sql.flockmtl)."),
)

BY_NAME = {option.name: option for option in RUN_OPTIONS}


def options_for(door: str) -> tuple[RunOption, ...]:
    return tuple(option for option in RUN_OPTIONS if door in option.doors)


def check_run_options(**values: Any) -> None:
    """Refuse the first value its option does not accept (options without a rule are their
    reader's to check)."""
    for name, value in values.items():
        option = BY_NAME.get(name)
        if option is not None and option.rule is not None:
            option.rule.check(value)


def refuse_unknown(given: Mapping[str, Any], door: str = RUN, also: tuple[str, ...] = ()) -> None:
    """A misspelt keyword (`checkpoint_evry=5`) is one AisqlError naming it, not a TypeError."""
    known = [option.name for option in options_for(door)] + list(also)
    for name in given:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            raise AisqlError(
                f"unknown run option {name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""),
                hint="run options: " + ", ".join(known),
            )


def _check_all(self) -> None:
    check_run_options(**{option.name: getattr(self, option.name) for option in RUN_OPTIONS})


RunRequest = dataclasses.make_dataclass(
    "RunRequest",
    [(option.name, Any, dataclasses.field(default=option.default)) for option in RUN_OPTIONS],
    namespace={"__post_init__": _check_all, "__doc__": "How to run a script: every option of RUN_OPTIONS, checked when built.", "__module__": __name__},
)
