"""The CLI's live progress on stderr: one bar per AI node (rich), never on stdout.

Shows prompts done / total, computed tokens per second, prompts answered from the result cache,
the time spent and the time left. The time spent ticks on its own (rich redraws ten times a
second), so a pass that answers nothing for a while — a remote server thinking, a long prefill —
still shows the run is alive and for how long it has waited. The executor only calls the
`Progress` protocol; this is one drawing of it.
"""

from __future__ import annotations

from typing import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.text import Text


class _TokensPerSecond(ProgressColumn):
    def render(self, task: Task) -> Text:
        elapsed = task.elapsed or 0.0
        tokens = task.fields.get("tokens", 0)
        rate = tokens / elapsed if elapsed > 0 else 0.0
        return Text(f"{rate:,.0f} tok/s", style="cyan")


class _Cached(ProgressColumn):
    def render(self, task: Task) -> Text:
        cached = task.fields.get("cached", 0)
        return Text(f"{cached:,} cached" if cached else "", style="green")


class RichProgress:
    """Implements aisql.executor.report.progress.Progress with rich bars on `console`."""

    def __init__(self, console: Console, get_time: Callable[[], float] | None = None) -> None:
        clock = {"get_time": get_time} if get_time is not None else {}  # a test's clock; rich's monotonic one else
        self._bars = Progress(
            TextColumn("{task.description}"),
            BarColumn(bar_width=16),
            MofNCompleteColumn(),
            TextColumn("prompts"),
            _TokensPerSecond(),
            _Cached(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=True,
            **clock,
        )
        self._tasks: dict[str, int] = {}

    def start(self, node: str, description: str, total: int, cached: int) -> None:
        if not self._tasks:
            self._bars.start()
        label = description if len(description) <= 24 else description[:21] + "..."
        self._tasks[node] = self._bars.add_task(f"{node} {label}", total=total, tokens=0, cached=cached)

    def advance(self, node: str, prompts: int, tokens: int) -> None:
        task = self._tasks.get(node)
        if task is None:
            return
        done = self._bars.tasks[self._task_index(task)]
        self._bars.update(task, advance=prompts, tokens=done.fields.get("tokens", 0) + tokens)

    def finish(self, node: str) -> None:
        task = self._tasks.pop(node, None)
        if task is not None:
            self._bars.remove_task(task)
        if not self._tasks:
            self._bars.stop()

    def close(self) -> None:
        """Stop drawing (also after an error, so the error line is not overdrawn)."""
        self._tasks.clear()
        self._bars.stop()

    def _task_index(self, task_id: int) -> int:
        return next(i for i, t in enumerate(self._bars.tasks) if t.id == task_id)
