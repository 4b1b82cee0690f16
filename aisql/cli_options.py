"""The command line's run options, made from their one declaration
(aisql.executor.options.run_options): a click option per declared option with a flag, its type
from the option's rule, its help and default from the declaration. Click refuses a bad value
naming the flag; the rule refuses it again for every other door.
"""

from __future__ import annotations

import math

import click

from aisql.executor.options.run_options import RunOption, options_for


class FiniteAmount(click.FloatRange):
    """A finite amount, 0 or more: click's FloatRange takes `nan` (which compares false with any
    limit: a --max-cost nan run ran unlimited) and `inf`."""

    name = "amount"

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


FINITE_AMOUNT = FiniteAmount(min=0)


def _click_option(option: RunOption, door: str):
    rule = option.rule
    extra: dict = {"help": option.help, "metavar": option.metavar}
    if rule is None or rule.kind == "flag":
        extra = {"help": option.help, "is_flag": True}
    elif rule.kind == "count":
        extra["type"] = click.IntRange(min=int(rule.minimum) if rule.minimum is not None else None)
    elif rule.kind == "amount":
        extra["type"] = FiniteAmount(min=rule.minimum if rule.minimum is not None else None)
    else:
        extra["type"] = click.Choice(list(rule.choices))
    if option.default is not None and option.default is not False:
        extra.update(default=option.default, show_default=True)
    return click.option(option.flag, option.name, **{k: v for k, v in extra.items() if v is not None})


def run_flags(door: str) -> list:
    """The click options of the run options a command (`run`, `explain`) takes."""
    return [_click_option(option, door) for option in options_for(door) if option.flag is not None]


def run_values(door: str, given: dict) -> dict:
    """The run options among a command's parameters, taken out of `given`."""
    return {option.name: given.pop(option.name) for option in options_for(door) if option.flag is not None and option.name in given}
