"""How many threads the CPU engine computes with: the cores this process may use and nobody else
is using, chosen at load, never more than asked.

torch's default is one thread per core it sees. On a shared machine that is the worst choice: an
OpenMP thread whose core another process holds is descheduled, and the others spin-wait for it at
every barrier — on this 2-core host with one core busy, 2 threads burned 3-7x the CPU per token of
1 thread. So the engine takes the cores it may run on (CPU affinity, then a cgroup CPU quota),
subtracts the cores other processes kept busy over a short sample of /proc/stat, and keeps at
least one. `--threads N` (or AISQL_THREADS) overrides the count; the count is said in every
output. Choosing by load is what vLLM's CPU backend does not do (it binds one OpenMP thread per
reserved core, VLLM_CPU_OMP_THREADS_BIND, for a machine it owns); aisql runs beside other work.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

SAMPLE_S = 0.2  # how long /proc/stat is watched for other processes' load


@dataclass(frozen=True)
class ThreadChoice:
    threads: int
    usable: int  # cores this process may run on (affinity, cgroup quota)
    busy: float  # cores other processes kept busy while sampled
    reason: str
    asked: bool = False  # --threads / AISQL_THREADS: kept as given

    def describe(self) -> str:
        return f"{self.threads} thread{'s' if self.threads != 1 else ''}"


def usable_cpus() -> int:
    """Cores this process may run on: its affinity mask, capped by a cgroup CPU quota."""
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count() or 1
    quota = _cgroup_quota()
    return max(1, min(count, math.ceil(quota)) if quota else count)


def _cgroup_quota() -> float | None:
    """cpu.max (cgroup v2) or cfs_quota/period (v1) as a number of cores; None: unlimited."""
    try:
        quota, period = open("/sys/fs/cgroup/cpu.max").read().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int(open("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read())
        period = int(open("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read())
        return None if quota <= 0 else quota / period
    except (OSError, ValueError):
        return None


def _cpu_times() -> tuple[float, float] | None:
    """(busy, total) jiffies over all CPUs, from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = [float(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already counted in user
    return total - idle, total


@dataclass(frozen=True)
class LoadReading:
    """The machine's CPU counters, this process's CPU time and the clock, at one moment."""

    times: tuple[float, float] | None
    own_s: float
    at: float

    @staticmethod
    def now() -> "LoadReading":
        return LoadReading(_cpu_times(), time.process_time(), time.monotonic())

    def busy_elsewhere_since(self, before: "LoadReading") -> float | None:
        """Cores other processes kept busy between `before` and this reading (this process's own
        CPU removed); None when the counters cannot tell."""
        if self.times is None or before.times is None or self.times[1] <= before.times[1]:
            return None
        fraction = (self.times[0] - before.times[0]) / (self.times[1] - before.times[1])
        own_cores = (self.own_s - before.own_s) / max(self.at - before.at, 1e-3)
        return max(0.0, fraction * (os.cpu_count() or 1) - own_cores)


def busy_cores_elsewhere(sample_s: float = SAMPLE_S) -> float:
    """Cores other processes kept busy during a short sample."""
    before = LoadReading.now()
    time.sleep(sample_s)
    return LoadReading.now().busy_elsewhere_since(before) or 0.0


def _fit(usable: int, busy: float) -> ThreadChoice:
    """The usable cores less the ones busy elsewhere (rounded to the nearest core), at least one."""
    threads = max(1, min(usable, usable - round(busy)))
    if threads < usable:
        reason = f"{busy:.1f} of {usable} usable cores busy with other work"
    else:
        reason = f"{usable} usable core{'s' if usable != 1 else ''}, idle"
    return ThreadChoice(threads, usable, round(busy, 2), reason)


def choose_threads(requested: int | None = None) -> ThreadChoice:
    """The engine's thread count: `requested` (or AISQL_THREADS) when given, else what the load
    leaves (`_fit`)."""
    from aisql.errors import ModelError

    configured = os.environ.get("AISQL_THREADS", "").strip()
    if requested is None and configured:
        if not configured.isdigit() or int(configured) < 1:
            raise ModelError(f"AISQL_THREADS must be a whole number of threads >= 1, not {configured!r}")
        requested = int(configured)
    usable = usable_cpus()
    if requested is None:
        return _fit(usable, busy_cores_elsewhere())
    if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
        raise ModelError(f"threads must be a whole number >= 1, not {requested!r}")
    return ThreadChoice(requested, usable, 0.0, "asked for", asked=True)


RECHECK_S = 1.0  # between engine calls, how old a load reading may be before it is read again
STALE_S = 5.0  # older than this, the interval since the last reading describes the past: sample afresh
FRESH_SAMPLE_S = 0.1


class ThreadGovernor:
    """Keeps torch's thread count at `choose_threads`'s answer while the engine runs: the load
    beside it is re-read between engine calls (at most once a second, from the counters' change
    since the last reading, no sleeping), so a burst of other work moves the engine to fewer
    threads and back. After a pause of more than STALE_S the change since the last reading
    says what ran while the engine was idle — another program's burst that has ended, say — so
    the load is sampled afresh for FRESH_SAMPLE_S instead (measured: after a vLLM run beside it,
    the stale window dropped aisql to one thread on an idle machine, 1.5x slower). A count asked
    for (`--threads`) stays fixed."""

    def __init__(self, requested: int | None = None) -> None:
        self.choice = choose_threads(requested)
        self._apply(self.choice.threads)
        self._last = LoadReading.now()

    @property
    def threads(self) -> int:
        return self.choice.threads

    def describe(self) -> str:
        return self.choice.describe()

    def adjust(self) -> None:
        if self.choice.asked or time.monotonic() - self._last.at < RECHECK_S:
            return
        if time.monotonic() - self._last.at > STALE_S:
            self._last = LoadReading.now()
            time.sleep(FRESH_SAMPLE_S)
        reading = LoadReading.now()
        busy = reading.busy_elsewhere_since(self._last)
        self._last = reading
        if busy is None:
            return
        choice = _fit(self.choice.usable, busy)
        if choice.threads != self.choice.threads:
            self.choice = choice
            self._apply(choice.threads)

    @staticmethod
    def _apply(threads: int) -> None:
        import torch

        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
