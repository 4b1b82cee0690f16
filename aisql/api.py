"""The Python API: a DuckDB connection with an engine and an answer store.

    con = aisql.connect(model="tiny")
    con.register("customers", "examples/data/customers.csv")
    result = con.run("SELECT name FROM customers WHERE AI.IF(PROMPT('{profile} likes hiking'))")
    result.table      # pyarrow.Table
    result.stats      # RunStats: prompts, tokens, time per AI node

The CLI is a thin layer over this module.
"""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import duckdb
import pyarrow as pa

from aisql.engine.base import Engine
from aisql.engine.loader import ResolvedModel, resolve_model_spec
from aisql.errors import AisqlError, DataError
from aisql.executor.answers import AnswerStore
from aisql.executor.budget import Budget
from aisql.executor.evaluate import OVERFLOW_MODES
from aisql.executor.node_runtime import RunOptions
from aisql.executor.progress import NoProgress, Progress
from aisql.executor.run import Executor
from aisql.executor.sampling import SampleEvaluator
from aisql.executor.measured_statistics import MeasuredStatistics
from aisql.executor.run_stats import RunStats
from aisql.planner import Plan, plan_statement
from aisql.planner.cost import PlanEstimate, estimate_plan
from aisql.planner.explain import plan_to_dict, plans_tree
from aisql.planner.hardware import Hardware, default_hardware, hardware_profile
from aisql.session import ModelSession, ModelUsed
from aisql.sql.bind import BoundStatement, bind_statement
from aisql.sql.parse import parse_script
from aisql.sql.source import SourceText

_RUNS = itertools.count(1)
_READERS = {
    ".csv": "read_csv_auto",
    ".tsv": "read_csv_auto",
    ".txt": "read_csv_auto",
    ".parquet": "read_parquet",
    ".json": "read_json_auto",
    ".jsonl": "read_json_auto",
    ".ndjson": "read_json_auto",
}


@dataclass
class QueryResult:
    table: pa.Table | None  # the last statement's rows (None if it returned none)
    stats: RunStats
    model: ModelUsed | None  # None when the script had no AI calls


@dataclass
class Explanation:
    plans: list[Plan]
    estimates: list[PlanEstimate | None] = field(default_factory=list)
    hardware: Hardware | None = None
    model: str | None = None

    def tree(self):
        header = ""
        if self.hardware is not None:
            hw = self.hardware
            header = (
                f"model {self.model} · hardware {hw.name} ({hw.peak_flops / 1e12:.2f} TFLOP/s peak"
                f"{' measured' if hw.measured else ''}, {hw.memory_bandwidth / 1e9:.0f} GB/s, ${hw.price_per_hour:.2f}/h)"
            )
        return plans_tree(self.plans, self.estimates, header)

    def to_dict(self) -> dict:
        data = {"statements": [plan_to_dict(p, e) for p, e in zip(self.plans, self.estimates)]}
        if self.hardware is not None:
            data["hardware"] = {
                "name": self.hardware.name,
                "peak_flops": self.hardware.peak_flops,
                "memory_bandwidth": self.hardware.memory_bandwidth,
                "price_per_hour": self.hardware.price_per_hour,
            }
            data["model"] = self.model
        return data


class Connection:
    """A DuckDB connection that plans and runs AI SQL through a model session (engine + result cache)."""

    def __init__(
        self,
        database: str | None = None,
        *,
        session: ModelSession | None = None,
        warn: Callable[[str], None] | None = None,
        **model_options,
    ) -> None:
        """`model_options` open this connection's model session (aisql.session.ModelSession:
        model, engine, engine_options, cache, store); `session` shares another connection's (or
        `aisql.register`'s) model, KV cache and result cache instead."""
        try:
            self.duckdb = duckdb.connect(database or ":memory:")
        except duckdb.Error as err:
            raise DataError(f"cannot open database {database}: {str(err).splitlines()[0]}") from None
        self.session = session or ModelSession(warn=warn, **model_options)
        self._warn = warn
        self.last_result: QueryResult | None = None  # of the last .sql() call

    # ---- setup ----------------------------------------------------------------------------
    @property
    def engine(self) -> Engine:
        """The engine, loaded on first use (scripts without AI calls never load a model)."""
        return self.session.engine

    @property
    def store(self) -> AnswerStore:
        return self.session.store

    @property
    def resolved_model(self) -> ResolvedModel:
        """Which model this connection means, decided once (without loading it)."""
        return self.session.resolved_model

    def fingerprint(self) -> str:
        """The model's identity in the result cache: weights, tokenizer, numerics."""
        return self.session.fingerprint()

    def register(self, name: str, data) -> None:
        """Make `data` queryable as `name`: a file path (CSV/Parquet/JSON) or an Arrow/pandas object."""
        if isinstance(data, (str, os.PathLike)):
            self.duckdb.execute(f"CREATE OR REPLACE TEMP VIEW {_quote(name)} AS {file_scan_sql(data)}")
        else:
            self.duckdb.register(name, data)

    def add_file_search_path(self, directories: Sequence[str | os.PathLike]) -> None:
        """Resolve relative file paths in queries against these directories too (DuckDB's file_search_path)."""
        dirs = [str(Path(d).resolve()) for d in directories]
        current = self.duckdb.execute("SELECT current_setting('file_search_path')").fetchall()[0][0]
        merged = [p for p in (current or "").split(",") if p] + [d for d in dirs if d]
        self.duckdb.execute("SET file_search_path = ?", [",".join(dict.fromkeys(merged))])

    # ---- running --------------------------------------------------------------------------
    def run(
        self,
        sql_text: str,
        *,
        naive: bool = False,
        hardware: str | None = None,
        price_per_hour: float | None = None,
        max_prompts: int | None = None,
        max_cost: float | None = None,
        on_overflow: str = "error",
        checkpoint_every: int = 256,
        checkpoint_seconds: float = 10.0,
        progress: Progress | None = None,
    ) -> QueryResult:
        """Run every statement of `sql_text`; the result is the last one that returned rows.

        Each statement is checked against the catalog (no model), planned with statistics —
        selectivities of unhinted AI predicates measured on a sample when their order matters —
        and run. Answers are committed to the result cache every `checkpoint_every` prompts or
        `checkpoint_seconds` of model time, so a killed run loses at most one chunk.

        `max_prompts` / `max_cost` (USD of model time at `hardware`'s price) stop the run before
        it crosses the limit: first against the planner's estimate (cached prompts are free),
        then chunk by chunk. `on_overflow`: a prompt longer than the model's context is an error,
        or is truncated ("truncate"; counted in the stats). `hardware`/`price_per_hour` also cost
        the run in the stats."""
        if on_overflow not in OVERFLOW_MODES:
            raise AisqlError(f"unknown on_overflow mode {on_overflow!r}", hint="use error or truncate")
        started = time.perf_counter()
        source = SourceText(sql_text)
        statements = self._bind(source)
        wants_price = hardware is not None or price_per_hour is not None or max_cost is not None or max_prompts is not None
        profile = hardware_profile(hardware or default_hardware(), price_per_hour) if wants_price else None
        budget = None
        if max_prompts is not None or max_cost is not None:
            budget = Budget(max_prompts, max_cost, price_per_hour=profile.price_per_hour if profile else 0.0)
        options = RunOptions(
            checkpoint_every=checkpoint_every,
            checkpoint_seconds=checkpoint_seconds,
            on_overflow=on_overflow,
            budget=budget,
            progress=progress or NoProgress(),
        )
        executor = Executor(
            self.duckdb,
            lambda: self.engine,
            self.store,
            lock=self.session.lock,
            naive=naive,
            namespace=self.fingerprint,
            options=options,
        )
        samples = None if naive else SampleEvaluator(lambda: self.engine, self.store, self.fingerprint, budget, on_overflow)
        nodes = []
        table = None
        for number, bound in enumerate(statements, 1):
            executor.check(bound, source)
            stats = None
            if bound.has_ai and not naive:
                stats = MeasuredStatistics(self.duckdb, lambda: self.engine.facts(), sampler=samples)
            if budget is not None and stats is not None:
                # First against an estimate that runs no model (not even selectivity samples),
                # then against the sampled plan that will run.
                where = "the query" if len(statements) == 1 else f"statement {number}"
                with stats.sampling_paused():
                    self._check_budget(plan_statement(bound, stats), stats, profile, budget, where)
            plan = plan_statement(bound, stats)
            if budget is not None and stats is not None:
                self._check_budget(plan, stats, profile, budget, where)
            result = executor.run(plan, bound, source, samples)
            nodes.extend(result.nodes)
            if result.table is not None:
                table = result.table
        used = self.session.model_used() if nodes else None
        stats = RunStats(
            model=used.name if used else resolve_model_spec(self.session.model_spec)[0],
            model_note=used.note if used else None,
            mode="naive" if naive else "planned",
            nodes=nodes,
            wall_s=time.perf_counter() - started,
            hardware=profile.name if profile else None,
            price_per_hour=profile.price_per_hour if profile else None,
        )
        return QueryResult(table=table, stats=stats, model=used)

    def sql(self, query: str, **run_options) -> duckdb.DuckDBPyRelation | None:
        """Plan and run `query` (AI calls included) and return its rows as a DuckDB relation, like
        `duckdb.sql` (None for statements that return no rows). `self.last_result` keeps the
        run's statistics; `run_options` are `run`'s."""
        self.last_result = self.run(query, **run_options)
        table = self.last_result.table
        return None if table is None else self.duckdb.from_arrow(table)

    def register_functions(self, con: duckdb.DuckDBPyConnection | None = None, **options):
        """Put ai_if, ai_classify, ai_generate and prompt on `con` (default: this connection's
        DuckDB), sharing this connection's model, KV cache and result cache (see aisql.duckdb_functions)."""
        from aisql.duckdb_functions import register

        return register(self.duckdb if con is None else con, session=self.session, **options)

    def _check_budget(self, plan: Plan, stats: MeasuredStatistics, profile: Hardware, budget: Budget, where: str) -> None:
        """The planner's estimate of new work — its prompts less the share a sample finds in the
        result cache — must fit what is left of the budget."""
        estimate = estimate_plan(plan, stats, profile)
        prompts = usd = 0.0
        for node in plan.nodes:
            node_estimate = estimate.node(node.id)
            if node_estimate is None or node_estimate.quality != "estimate":
                continue
            new_share = 1.0 - self._cached_share(node, stats)
            prompts += node_estimate.plan.prompts * new_share
            usd += node_estimate.plan.usd * new_share
        budget.check_estimate(prompts, usd, where)

    def _cached_share(self, node, stats: MeasuredStatistics, size: int = 64) -> float:
        sample = stats.sample(node, size)
        if not sample:
            return 0.0
        texts = [node.call.template.render(values) for values, _ in sample]
        found = self.store.get_many(node.call.task.store_key(self.fingerprint()), texts)
        return len(found) / len(texts)

    def explain(
        self, sql_text: str, *, hardware: str = "cpu", price_per_hour: float | None = None, sample: int = 0
    ) -> Explanation:
        """Plans of every statement with cost estimates, plan vs naive. No model weights are loaded
        unless `sample` > 0 asks to measure selectivities on that many prompts per AI predicate."""
        from aisql.engine.loader import load_model_facts

        source = SourceText(sql_text)
        statements = self._bind(source)
        facts_cache: list = []

        def facts():
            if not facts_cache:
                facts_cache.append(
                    self.engine.facts()
                    if (self.session.loaded or sample)
                    else load_model_facts(self.session.model_spec, warn=self._warn)
                )
            return facts_cache[0]

        sampler = SampleEvaluator(lambda: self.engine, self.store, self.fingerprint) if sample else None
        stats = MeasuredStatistics(self.duckdb, facts, sampler=sampler, sample_size=sample or 32, min_sampling_ratio=0.0)
        profile = hardware_profile(hardware, price_per_hour)
        plans = [plan_statement(bound, stats) for bound in statements]
        has_ai = any(p.nodes for p in plans)
        estimates = [estimate_plan(p, stats, profile) if p.nodes else None for p in plans]
        model = stats.model.name if has_ai and stats.model else None
        return Explanation(plans=plans, estimates=estimates, hardware=profile, model=model)

    def _bind(self, source: SourceText) -> list[BoundStatement]:
        """Parse and bind every statement before anything runs, so front-end errors come first."""
        statements = []
        calls_so_far = 0
        for statement in parse_script(source):
            bound = bind_statement(
                statement, source, function_prefix=f"__aisql_{next(_RUNS)}_", first_call_number=calls_so_far + 1
            )
            calls_so_far += len(bound.calls)
            statements.append(bound)
        return statements

    def close(self) -> None:
        self.duckdb.close()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def connect(database: str | None = None, *, model: str | None = None, **options) -> Connection:
    """Open an aisql connection (in-memory DuckDB unless `database` names a file). `options`: engine
    options (device, kv_budget, quantize, ...) and session options (engine, cache, store, warn)."""
    return Connection(database, session=ModelSession.from_options(model, **options), warn=options.get("warn"))


def file_scan_sql(path: str | os.PathLike) -> str:
    """SELECT over a data file, by its suffix, with a clear error if it does not exist."""
    path = Path(path).expanduser()
    if not path.exists():
        raise DataError(f"file not found: {path}")
    reader = _READERS.get(path.suffix.lower())
    if reader is None:
        raise DataError(
            f"cannot tell the format of {path}: expected one of {', '.join(sorted(_READERS))}",
        )
    literal = str(path).replace("'", "''")
    return f"SELECT * FROM {reader}('{literal}')"


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
