"""aisql's functions in dbt: a dbt-duckdb plugin that registers them on dbt's DuckDB connection.

    # profiles.yml
    my_profile:
      outputs:
        dev:
          type: duckdb
          path: warehouse.duckdb
          plugins:
            - module: aisql.dbt_plugin
              config: {model: smollm2}

Models then use the DuckDB-function spellings (`ai_if(prompt('... {0}', col))`, `ai_classify`,
`ai_generate`, ...; aisql.duckdb_functions). Every answer goes to aisql's result cache (the one
`aisql run` uses, unless `cache` names another file), committed as it is computed, so a second
`dbt run` — or one after a crash or Ctrl-C — asks the model only for what is missing.

Config keys: `model` (any --model form), `cache` (a path, or false), `device`, `dtype`,
`threads`, `kv_budget`, `quantize`, the run options of aisql.register (`checkpoint_every`, `checkpoint_seconds`,
`on_overflow`), `stats_json` (a file the per-function counts are
written to when dbt exits) and `quiet` (no summary line on stderr at exit).
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import sys
from typing import Any

from dbt.adapters.duckdb.plugins import BasePlugin

from aisql.executor.options.run_options import FUNCTIONS, check_run_options, options_for

ENGINE_KEYS = ("device", "dtype", "threads", "kv_budget", "quantize")
RUN_KEYS = tuple(option.name for option in options_for(FUNCTIONS))  # the run options aisql.register takes


class Plugin(BasePlugin):
    """Registers aisql's AI functions on the connection dbt-duckdb opens."""

    def initialize(self, plugin_config: dict[str, Any]) -> None:
        known = {"model", "cache", "stats_json", "quiet", *ENGINE_KEYS, *RUN_KEYS}
        unknown = sorted(set(plugin_config) - known)
        if unknown:
            raise ValueError(f"aisql.dbt_plugin: unknown config key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        try:
            check_run_options(**{key: plugin_config[key] for key in RUN_KEYS if key in plugin_config})
        except Exception as err:  # dbt prints a plugin's error; it names the key and the value
            raise ValueError(f"aisql.dbt_plugin: config {err}") from None
        self.config = dict(plugin_config)
        self.handle = None
        atexit.register(self._report)

    def configure_connection(self, conn) -> None:
        import aisql

        config = self.config
        engine = {key: config[key] for key in ENGINE_KEYS if key in config}
        if "kv_budget" in engine and isinstance(engine["kv_budget"], str):
            from aisql.sizes import parse_size

            engine["kv_budget"] = parse_size(engine["kv_budget"])
        run = {key: config[key] for key in RUN_KEYS if key in config}
        self.handle = aisql.register(
            conn,
            model=config.get("model"),
            cache=config.get("cache", True),
            warn=lambda message: print(f"aisql: {message}", file=sys.stderr),
            **run,
            **engine,
        )

    def _report(self) -> None:
        """At exit: the counts per function to `stats_json`, and one summary line on stderr."""
        if self.handle is None:
            return
        used = {name: dataclasses.asdict(stats) for name, stats in self.handle.stats.items() if stats.rows_in}
        totals = {key: sum(s.get(key, 0) for s in used.values()) for key in ("prompts_total", "prompts_unique", "prompts_cached", "prompts_evaluated")}
        if self.config.get("stats_json"):
            with open(self.config["stats_json"], "w", encoding="utf-8") as out:
                json.dump({"functions": used, **totals}, out, indent=1)
        if used and not self.config.get("quiet"):
            print(
                f"aisql: {totals['prompts_total']:,} prompts ({totals['prompts_unique']:,} distinct): "
                f"{totals['prompts_cached']:,} answered from the result cache, "
                f"{totals['prompts_evaluated']:,} asked the model",
                file=sys.stderr,
            )
        if used:  # answers that carry little signal are said even with quiet: they change what the models' rows mean
            from aisql.executor.report.signals import warnings_of

            for message in warnings_of(s for s in self.handle.stats.values() if s.rows_in):
                print(f"aisql: warning: {message}", file=sys.stderr)
