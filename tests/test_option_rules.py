"""A run's options are checked once (aisql.executor.options.run_options), so every door refuses a bad
value the same way, before any prompt runs: one AisqlError naming the option and the value.
Was: checkpoint_every='zero' a TypeError in Python and a UDF exception in dbt; 0 and -5 accepted."""

from __future__ import annotations

import duckdb
import pytest
from click.testing import CliRunner

import aisql
from aisql.cli import main
from aisql.errors import AisqlError
from aisql.executor.options.run_options import BY_NAME as RUN_OPTIONS, check_run_options

BAD = [
    ("checkpoint_every", "zero", "checkpoint_every must be a whole number, 1 or more, got 'zero'"),
    ("checkpoint_every", 0, "checkpoint_every must be a whole number, 1 or more, got 0"),
    ("checkpoint_every", -5, "got -5"),
    ("checkpoint_every", True, "got True"),
    ("checkpoint_every", 2.5, "got 2.5"),
    ("checkpoint_seconds", 0, "checkpoint_seconds must be a finite number, more than 0, got 0"),
    ("on_overflow", "ignore", "on_overflow must be one of error, truncate, got 'ignore'"),
]
RUN_ONLY = [
    ("max_prompts", -1, "max_prompts must be a whole number, 0 or more, got -1"),
    ("max_prompts", "10", "got '10'"),
    ("max_cost", float("nan"), "max_cost must be a finite number, 0 or more, got nan"),
    ("price_per_hour", -1.0, "price_per_hour must be a finite number, 0 or more, got -1.0"),
]


class NeverAsked:
    """An engine any use of which fails the test: a refused option runs nothing."""

    def __getattr__(self, name):
        raise AssertionError(f"the engine was used ({name}) though the options were refused")


@pytest.mark.parametrize("name, value, message", BAD + RUN_ONLY)
def test_the_python_api_refuses_before_running(make_connection, name, value, message):
    con = make_connection(engine=NeverAsked())
    with pytest.raises(AisqlError) as err:
        con.run("SELECT id FROM reviews WHERE AI.IF(review)", **{name: value})
    assert message in err.value.message


@pytest.mark.parametrize("name, value, message", BAD)
def test_duckdb_functions_refuse_at_registration(tiny_engine, name, value, message):
    with pytest.raises(AisqlError, match="must be") as err:
        aisql.register(duckdb.connect(), engine=tiny_engine, cache=False, **{name: value})
    assert message in err.value.message


@pytest.mark.parametrize("name, value, message", [case for case in BAD if case[0] in ("checkpoint_every", "on_overflow")])
def test_the_dbt_plugin_names_the_key_and_value(name, value, message):
    pytest.importorskip("dbt.adapters.duckdb", reason="dbt-duckdb is a dev extra (aisql-engine[dbt])")
    from aisql.dbt_plugin import Plugin

    with pytest.raises(ValueError) as err:
        Plugin("aisql", {"model": "tiny", name: value})
    assert str(err.value) == f"aisql.dbt_plugin: config {message}" or message in str(err.value)


@pytest.mark.parametrize("option, value", [("--checkpoint-every", "0"), ("--checkpoint-every", "zero"), ("--max-prompts", "-5")])
def test_the_cli_refuses_with_its_option_name(tmp_path, monkeypatch, option, value):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["run", "-e", "SELECT 1", "--model", "tiny", "--no-cache", option, value])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert option in result.stderr


def test_a_misspelt_option_is_named(make_connection):
    with pytest.raises(AisqlError, match="unknown run option 'checkpoint_evry' \\(did you mean 'checkpoint_every'\\?\\)"):
        make_connection().run("SELECT 1", checkpoint_evry=5)


def test_good_values_pass_and_limits_may_be_absent():
    check_run_options(checkpoint_every=1, checkpoint_seconds=0.5, on_overflow="truncate", max_prompts=0, max_cost=None, price_per_hour=0)
    assert {"checkpoint_every", "checkpoint_seconds", "on_overflow", "max_prompts", "max_cost", "price_per_hour"} <= set(RUN_OPTIONS)


def test_every_door_is_made_from_the_one_declaration():
    """A run option is declared once (aisql.executor.options.run_options): RunRequest's fields,
    the CLI's flags, aisql.register's and the dbt plugin's settings and explain's options are all
    made from the table, so a new option is its entry plus the code that reads it."""
    import dataclasses

    from aisql.cli_options import run_flags
    from aisql.duckdb_functions import FUNCTION_OPTIONS
    from aisql.executor.answers.answer_types import RunOptions
    from aisql.executor.options.run_options import EXPLAIN, FUNCTIONS, RUN, RUN_OPTIONS as DECLARED, RunRequest, options_for

    assert [f.name for f in dataclasses.fields(RunRequest)] == [o.name for o in DECLARED]
    assert FUNCTION_OPTIONS == tuple(o.name for o in options_for(FUNCTIONS))
    help_text = CliRunner().invoke(main, ["run", "--help"]).output
    flagged = [o for o in options_for(RUN) if o.flag]
    assert len(run_flags(RUN)) == len(flagged) and all(o.flag in help_text for o in flagged)
    explain_help = CliRunner().invoke(main, ["explain", "--help"]).output
    assert all(o.flag in explain_help for o in options_for(EXPLAIN) if o.flag)
    assert "--checkpoint-every" in explain_help  # explain --workers sizes its shards by it
    # the executor reads any declared option by name, the user's value or its default
    options = RunOptions.of(checkpoint_every=7)
    assert options.checkpoint_every == 7 and options.on_overflow == "error" and options.max_prompts is None


def test_the_dbt_plugin_takes_the_functions_options():
    pytest.importorskip("dbt.adapters.duckdb", reason="dbt-duckdb is a dev extra (aisql-engine[dbt])")
    from aisql.dbt_plugin import RUN_KEYS
    from aisql.executor.options.run_options import FUNCTIONS, options_for

    assert RUN_KEYS == tuple(o.name for o in options_for(FUNCTIONS))
