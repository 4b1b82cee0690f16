"""How a stopped run ends: SIGINT and SIGTERM turned into a stop that keeps what was committed,
reported in one line with the kept count, and the exit code (130 / 143); a user's error in one
`error:` line. Shared by `aisql run` and the shell, which both stop alike.
"""

from __future__ import annotations

import contextlib
import signal

from aisql.console import escape, stderr
from aisql.errors import AisqlError


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that a terminated run stops as Ctrl-C stops it: what
    was committed stays committed and is said (a batch scheduler's kill is not a crash)."""


@contextlib.contextmanager
def stop_signals():
    """While a run is in progress and its stop is reported: the first SIGINT raises
    KeyboardInterrupt and the first SIGTERM Terminated, so the run stops as Ctrl-C stops it (what
    was committed stays committed, and is said). Any later SIGINT or SIGTERM is ignored until the
    report is printed: GNU `timeout` and batch schedulers signal a whole process group, and a user
    presses Ctrl-C twice, so one stop often arrives twice — it must not cut the report (a bare
    `interrupted`, or exit 143 with nothing said) or the commits it waits for."""
    stopped: list[int] = []

    def stop(signum, frame):
        if stopped:
            return  # the run is already stopping
        stopped.append(signum)
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    try:
        # a signal the process was started ignoring (nohup, a background job) stays ignored
        previous = {
            number: signal.signal(number, stop)
            for number in (signal.SIGINT, signal.SIGTERM)
            if signal.getsignal(number) is not signal.SIG_IGN
        }
    except ValueError:  # not the main thread (an embedding caller): leave signals alone
        yield
        return
    try:
        yield
    finally:
        for number, handler in previous.items():
            # Stopped, the process is exiting with the stop's code: a signal still arriving is
            # ignored to the end (the interpreter's shutdown would restore the default action of
            # a Python handler, and a repeated SIGTERM or SIGINT then kill it mid-exit).
            signal.signal(number, signal.SIG_IGN if stopped else handler)


def kept_message(store) -> str:
    """What an interrupted run leaves behind, in one line: the answers it committed, and how to go on."""
    kept = getattr(store, "committed", 0)
    path = getattr(store, "path", None)
    if path is None:
        return f"{kept:,} answers were computed but not kept (--no-cache)" if kept else "no answers were computed"
    if not kept:
        return "no answers were committed yet; rerun to start again"
    return f"{kept:,} answers kept in the result cache ({path}); rerun to resume (only the rest is asked)"


def is_interrupt(err: BaseException) -> bool:
    """Ctrl-C as it may arrive: Python's KeyboardInterrupt, or DuckDB's own report of it when the
    signal came while DuckDB was running a query (it stops the query and raises an error, or
    wraps the KeyboardInterrupt raised inside one of aisql's functions)."""
    if isinstance(err, KeyboardInterrupt):
        return True
    text = err.message if isinstance(err, AisqlError) else str(err)
    if type(err).__name__ == "InterruptException":
        return True
    return isinstance(err, (RuntimeError, AisqlError)) and any(word in text for word in ("Query interrupted", "KeyboardInterrupt", "Terminated"))


def report_interrupt(store, stop: BaseException) -> int:
    """Say what was kept; the exit code of a run stopped by SIGINT (130) or SIGTERM (143)."""
    terminated = isinstance(stop, Terminated) or (not isinstance(stop, KeyboardInterrupt) and "Terminated" in str(stop))
    stderr.print(f"[bold red]{'terminated' if terminated else 'interrupted'}:[/bold red] {escape(kept_message(store))}")
    return 143 if terminated else 130


def report_error(err: AisqlError) -> None:
    """One `error:` line naming the problem and its place, and a hint line if there is one."""
    stderr.print(f"[bold red]error:[/bold red] {escape(err.located())}")
    if err.hint:
        stderr.print(f"[dim]hint: {escape(err.hint)}[/dim]")
