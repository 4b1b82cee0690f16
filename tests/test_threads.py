"""The CPU engine's thread count follows the cores other work leaves idle (aisql.engine.threads):
on a 2-core host with one core busy, 2 threads burned 2.25x the CPU per token of 1 thread."""

from __future__ import annotations

import pytest

from aisql.engine import threads as threads_module
from aisql.engine.threads import ThreadGovernor, choose_threads
from aisql.errors import ModelError


class FakeHost:
    """/proc/stat and the clocks of a 2-core host: `advance(seconds, others, own)` lets other
    processes keep `others` cores busy and this one `own` cores."""

    def __init__(self, monkeypatch, cores: int = 2):
        self.busy = self.total = 0.0
        self.own = self.now = 0.0
        self.cores = cores
        monkeypatch.setattr(threads_module, "_cpu_times", lambda: (self.busy, self.total))
        monkeypatch.setattr(threads_module.time, "process_time", lambda: self.own)
        monkeypatch.setattr(threads_module.time, "monotonic", lambda: self.now)
        monkeypatch.setattr(threads_module.time, "sleep", lambda s: self.advance(s, self.others, 0.0))
        monkeypatch.setattr(threads_module, "usable_cpus", lambda: cores)
        monkeypatch.setattr(threads_module.os, "cpu_count", lambda: cores)
        monkeypatch.setattr(ThreadGovernor, "_apply", staticmethod(lambda n: None))
        monkeypatch.delenv("AISQL_THREADS", raising=False)
        self.others = 0.0

    def advance(self, seconds: float, others: float, own: float) -> None:
        self.busy += (others + own) * seconds * 100
        self.total += self.cores * seconds * 100
        self.own += own * seconds
        self.now += seconds


def test_an_idle_host_gets_every_usable_core(monkeypatch):
    FakeHost(monkeypatch)
    assert choose_threads().threads == 2


def test_a_core_busy_elsewhere_is_left_alone(monkeypatch):
    host = FakeHost(monkeypatch)
    host.others = 1.0
    choice = choose_threads()
    assert choice.threads == 1 and "busy with other work" in choice.reason


def test_asked_for_threads_are_kept(monkeypatch):
    host = FakeHost(monkeypatch)
    host.others = 2.0
    assert choose_threads(3).threads == 3
    with pytest.raises(ModelError, match="threads must be a whole number"):
        choose_threads(0)
    monkeypatch.setenv("AISQL_THREADS", "1")
    assert choose_threads().threads == 1
    monkeypatch.setenv("AISQL_THREADS", "two")
    with pytest.raises(ModelError, match="AISQL_THREADS must be a whole number"):
        choose_threads()


def test_the_governor_follows_the_load_between_batches(monkeypatch):
    host = FakeHost(monkeypatch)
    governor = ThreadGovernor()
    assert governor.threads == 2
    host.advance(2.0, others=1.0, own=1.2)  # another process took a core; our 2 threads got 1.2
    governor.adjust()
    assert governor.threads == 1
    host.advance(0.5, others=0.0, own=1.0)  # read again only after a second
    governor.adjust()
    assert governor.threads == 1
    host.advance(2.0, others=0.0, own=1.0)  # the other process is gone
    governor.adjust()
    assert governor.threads == 2
    fixed = ThreadGovernor(2)
    host.advance(2.0, others=2.0, own=0.1)
    fixed.adjust()
    assert fixed.threads == 2


def test_after_a_pause_the_load_is_sampled_afresh_not_averaged_over_the_pause(monkeypatch):
    host = FakeHost(monkeypatch)
    governor = ThreadGovernor()
    host.advance(60.0, others=2.0, own=0.0)  # while the engine was idle another program held both cores...
    host.others = 0.0  # ...and has ended
    governor.adjust()
    assert governor.threads == 2
    host.advance(60.0, others=0.0, own=0.0)  # idle, then a program that is busy now
    host.others = 1.0
    governor.adjust()
    assert governor.threads == 1
