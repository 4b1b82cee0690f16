"""A pool of engine workers on Ray: started once per session, shards handed out as workers free up.

Each worker is a Ray actor holding one engine (aisql.executor.cluster.worker), one GPU each on
CUDA. The driver hands a worker its next shard as soon as it returns the last one (work stealing
by shard: no static split), and alone receives answers: the caller stores each shard's answers
when they arrive, so a crash loses at most the shards in flight.

A worker that dies (its process killed, its node lost, out of memory): the shard it was running
goes back to the head of the queue and the next free worker takes it; a replacement actor is
started in its slot (at most `max_restarts` per slot) and joins once its model is loaded and its
fingerprint checked. Nothing a dead worker computed reached the driver, so no answer is lost and
none is stored twice. A shard that kills two workers fails the query (a poison shard would
otherwise kill every replacement); every answer stored before stays.
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from aisql.engine.model.resolving import ResolvedModel
from aisql.engine.options import EngineOptions
from aisql.errors import AisqlError, ModelError
from aisql.ray_actors import actor_class, first_line, import_ray, start_local_runtime
from aisql.executor.cluster.worker import WorkerInfo

MAX_SHARD_DEATHS = 2


@dataclass(frozen=True)
class ClusterOptions:
    """Where the workers run and how many. `address`: a Ray cluster (ray://HOST:PORT, or 'auto'
    for the one this machine belongs to); None starts a local Ray runtime."""

    workers: int | None = None  # None: one per GPU of the cluster (one per node without GPUs)
    address: str | None = None
    threads: int | None = None  # torch threads per worker on CPU (default: the CPUs / workers)
    max_restarts: int = 2  # replacement workers per slot after deaths
    object_store_bytes: int = 256 << 20  # a local runtime's object store (prompts and answers pass through it)

    @classmethod
    def from_user(cls, cluster: Any = None, workers: int | None = None) -> "ClusterOptions | None":
        """`cluster` as `aisql.connect(cluster=...)` takes it: a worker count, 'local', a Ray
        address, or ClusterOptions; `workers` as --workers. RAY_ADDRESS is read only here, when
        one of them asks for workers."""
        if isinstance(cluster, ClusterOptions):
            return cluster if workers is None else replace(cluster, workers=workers)
        if cluster is None and workers is None:
            return None
        address = None
        if isinstance(cluster, bool):
            raise AisqlError("cluster= takes a worker count, 'local' or a Ray address (ray://HOST:PORT), not a boolean")
        if isinstance(cluster, int):
            workers = cluster if workers is None else workers
        elif isinstance(cluster, str):
            spec = cluster.strip()
            if spec.lower() != "local":
                if not (spec.startswith("ray://") or spec == "auto" or _host_port(spec)):
                    raise AisqlError(
                        f"cannot read the cluster address {cluster!r}",
                        hint="write ray://HOST:PORT (Ray Client, port 10001 by default), HOST:PORT on a cluster node, or 'auto'",
                    )
                address = spec
        elif cluster is not None:
            raise AisqlError(f"cluster= takes a worker count, 'local' or a Ray address, not {type(cluster).__name__}")
        if address is None and cluster is None:
            address = os.environ.get("RAY_ADDRESS") or None
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
            raise AisqlError(f"workers must be a whole number >= 1, got {workers!r}")
        if address is None and workers is None:
            raise AisqlError("a local Ray runtime needs a worker count", hint="give --workers N (or cluster=N)")
        return cls(workers=workers, address=address)

    def describe(self) -> str:
        where = self.address or "a local Ray runtime"
        return f"{self.workers or 'one per GPU'} workers on {where}"


@dataclass
class WorkerStats:
    """One worker slot over the pool's life (replacements included): where it runs, how often it
    died, how long its models took to load. Its work is counted per node (NodeStats.workers)."""

    name: str
    host: str = ""
    device: str = ""
    deaths: int = 0
    load_s: float = 0.0

    def to_dict(self) -> dict:
        return {**self.__dict__, "load_s": round(self.load_s, 3)}


@dataclass
class _Slot:
    stats: WorkerStats
    handle: Any = None
    starting: Any = None  # the describe() reference of an actor still loading its model
    alive: bool = False
    busy: bool = False
    restarts: int = 0


@dataclass
class _InFlight:
    slot: _Slot
    token: Any  # the caller's shard handle, given back on its result or death
    items: Sequence


class WorkerPool:
    def __init__(
        self,
        options: ClusterOptions,
        model: ResolvedModel,
        engine_options: EngineOptions,
        expected_fingerprint: Callable[[EngineOptions], str],
    ) -> None:
        """`model`: the session's resolved model, handed to every worker; `expected_fingerprint`: the driver's idea of the
        model under the workers' engine options (device: cuda on GPU workers); a worker with
        another fails the query."""
        self.options = options
        self.model = model
        self.engine_options = engine_options
        self._expected = expected_fingerprint
        self.slots: list[_Slot] = []
        self.info: WorkerInfo | None = None  # the first worker's describe()
        self._ray = None
        self._owns_runtime = False
        self._remote_class = None
        self._actor_options: dict = {}
        self._threads: int | None = None
        self._next = 0
        self._workers = 0
        self.worker_options = engine_options
        self.on_dispatch: Callable[[str, Any, int], None] | None = None  # test hook: (worker, actor, prompts)
        self.on_death: Callable[[str], None] | None = None  # (worker): its cache is gone

    # ---- life -----------------------------------------------------------------------------
    def connect(self) -> EngineOptions:
        """Join (or start) the Ray runtime and decide what each worker gets: a GPU when the
        cluster has them (device auto), else CPUs. Returns the workers' engine options."""
        if self._ray is not None:
            return self.worker_options
        ray = import_ray("running on several workers")
        if not ray.is_initialized():
            self._init_runtime(ray)
        self._ray = ray
        gpus = self._gpus_per_worker(ray)
        self._workers = self.options.workers or self._default_workers(ray, gpus)
        self.worker_options = self.engine_options
        self._check_room(ray, gpus)
        if gpus:
            self._actor_options = {"num_cpus": 1, "num_gpus": 1}
            if self.engine_options.device == "auto":
                self.worker_options = replace(self.engine_options, device="cuda")  # the actor's GPU is its cuda:0
        else:
            cpus = int(ray.cluster_resources().get("CPU", 1))
            self._threads = self.options.threads or max(1, cpus // self._workers)
            self._actor_options = {"num_cpus": self._threads}
            if self.engine_options.device == "auto":
                self.worker_options = replace(self.engine_options, device="cpu")
        return self.worker_options

    def start(self) -> None:
        self.connect()
        ray = self._ray
        from aisql.executor.cluster.worker import EngineWorker

        self._remote_class = actor_class(ray, EngineWorker)
        self.slots = [_Slot(WorkerStats(f"w{i}")) for i in range(self._workers)]
        for slot in self.slots:
            self._launch(slot)
        for slot in self.slots:  # wait for every model to load (and fail on the first bad one)
            self._joined(slot, self._get(slot.starting, slot))

    def _init_runtime(self, ray) -> None:
        # Ray prints what workers and raylets say ("(raylet) A worker died ...") to the driver's
        # stdout: inside `--format csv > out.csv` data. Data goes to stdout only: their lines go
        # to stderr, or (where Ray's printer cannot be redirected) stay in the workers' logs.
        log_to_driver = _worker_logs_to_stderr()
        if self.options.address:
            try:
                with warnings.catch_warnings():  # its timeout warning says what the error below says
                    warnings.simplefilter("ignore")
                    ray.init(address=self.options.address, logging_level=logging.ERROR, log_to_driver=log_to_driver)
            except Exception as err:  # Ray raises ConnectionError, ValueError, RuntimeError, ... here
                raise AisqlError(
                    f"cannot join the Ray cluster at {self.options.address}: {first_line(err)}",
                    hint="is it up (`ray status` on its head node)? Ray Client listens on ray://HEAD:10001",
                ) from None
        else:
            start_local_runtime(ray, self.options.object_store_bytes, log_to_driver)
        self._owns_runtime = True

    def _check_room(self, ray, gpus: int) -> None:
        """Refuse a pool the cluster cannot hold (its actors would wait forever for resources)."""
        resources = ray.cluster_resources()
        kind, have = ("GPU", int(resources.get("GPU", 0))) if gpus else ("CPU", int(resources.get("CPU", 0)))
        need = self._workers * (1 if gpus else (self.options.threads or 1))
        if need > have:
            where = self.options.address or "the local Ray runtime"
            raise AisqlError(
                f"{self._workers} workers need {need} {kind}s and {where} has {have}",
                hint=f"ask for at most {have // max(1, need // self._workers)} workers",
            )

    def _gpus_per_worker(self, ray) -> int:
        device = self.engine_options.device
        if device.startswith("cuda"):
            return 1
        if device == "auto" and ray.cluster_resources().get("GPU", 0) >= 1:
            return 1
        return 0

    def _default_workers(self, ray, gpus: int) -> int:
        if gpus:
            return int(ray.cluster_resources().get("GPU", 1))
        return max(1, sum(1 for node in ray.nodes() if node.get("Alive")))

    def _launch(self, slot: _Slot) -> None:
        slot.handle = self._remote_class.options(**self._actor_options).remote(self.model, self.worker_options, self._threads)
        slot.starting = slot.handle.describe.remote()
        slot.alive = False

    def _joined(self, slot: _Slot, info: WorkerInfo) -> None:
        """A worker has loaded its model: check it is the driver's before it answers anything."""
        expected = self._expected(self.worker_options)
        if info.model.fingerprint != expected:
            raise ModelError(
                f"worker {slot.stats.name} on {info.host} loaded a different model (fingerprint {info.model.fingerprint[:16]}, "
                f"the driver's {expected[:16]}): no answer was stored",
                hint="give every node the same model files, aisql version and engine options",
            )
        slot.starting = None
        slot.alive = True
        slot.stats.host, slot.stats.device = info.host, info.model.device
        slot.stats.load_s += info.load_s
        if self.info is None:
            self.info = info

    def close(self) -> None:
        ray = self._ray
        if ray is None:
            return
        for slot in self.slots:
            if slot.handle is not None:
                try:
                    ray.kill(slot.handle)
                except Exception:  # already gone
                    pass
        self.slots = []
        if self._owns_runtime and ray.is_initialized():
            ray.shutdown()
        self._ray = None

    def wait_ready(self) -> None:
        """Block until replacement workers still loading have joined (or died for good)."""
        ray = self._ray
        for slot in self.slots:
            while slot.starting is not None:
                try:
                    info = ray.get(slot.starting)
                except ray.exceptions.RayActorError:
                    self._died(slot)
                    continue
                self._joined(slot, info)

    @property
    def size(self) -> int:
        return len(self.slots)

    def worker_stats(self) -> list[WorkerStats]:
        return [slot.stats for slot in self.slots]

    # ---- the shard loop -------------------------------------------------------------------
    def run_shards(
        self,
        task,
        next_shard: Callable[[str], tuple[Any, Sequence] | None],
        put_back: Callable[[Any], None],
        on_result: Callable[[Any, Any, str], None],
        *,
        method: str = "run_shard",
        extra: tuple = (),
    ) -> None:
        """Run shards until `next_shard(worker)` has none left: (token, items) each, cut for
        whichever worker is free, run by the worker's `method` (run_shard: prepared prompts;
        run_texts: prompt texts the worker encodes) with `extra` arguments. `on_result(token, ShardResult, worker name)` runs here, on
        the driver, once per shard; `put_back(token)` requeues the shard of a dead worker."""
        _ShardRun(self, task, next_shard, put_back, on_result, method, extra).run()

    def _died(self, slot: _Slot) -> None:
        slot.alive = False
        slot.busy = False
        slot.starting = None
        slot.stats.deaths += 1
        if self.on_death is not None:
            self.on_death(slot.stats.name)
        if slot.restarts < self.options.max_restarts:
            slot.restarts += 1
            self._launch(slot)
        elif not any(s.alive or s.starting is not None for s in self.slots):
            raise ModelError("every worker died and none could be restarted: the query stopped (answers received so far are stored)")

    # ---- single calls (naive rows, selectivity samples) -------------------------------------
    def call(self, method: str, *args) -> tuple[Any, str]:
        """One call on one worker (round robin), retried on another if the worker dies: its
        result and the worker's name."""
        ray = self._ray
        for _ in range(len(self.slots) * (self.options.max_restarts + 1) + 1):
            alive = [s for s in self.slots if s.alive]
            if not alive:
                starting = [s for s in self.slots if s.starting is not None]
                if not starting:
                    break
                slot = starting[0]
                try:
                    self._joined(slot, ray.get(slot.starting))
                except ray.exceptions.RayActorError:
                    self._died(slot)
                continue
            slot = alive[self._next % len(alive)]
            self._next += 1
            try:
                return ray.get(getattr(slot.handle, method).remote(*args)), slot.stats.name
            except ray.exceptions.RayActorError:
                self._died(slot)
            except ray.exceptions.RayTaskError as err:
                raise _cause(err) from None
        raise ModelError("every worker died and none could be restarted")

    def broadcast(self, method: str) -> None:
        ray = self._ray
        refs = [getattr(s.handle, method).remote() for s in self.slots if s.alive]
        try:
            ray.get(refs)
        except ray.exceptions.RayActorError:
            pass  # a dead worker's cache is gone anyway

    def _get(self, ref, slot: _Slot):
        try:
            return self._ray.get(ref)
        except self._ray.exceptions.RayTaskError as err:
            raise _cause(err, f"worker {slot.stats.name} could not load the model") from None
        except self._ray.exceptions.RayActorError as err:
            raise ModelError(f"worker {slot.stats.name} could not start: {first_line(err)}") from None


def _cause(err, context: str | None = None) -> Exception:
    """The worker's own exception (an aisql error keeps its message and hint), not Ray's wrapper."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, AisqlError):
        if context:
            cause.message = f"{context}: {cause.message}"
        return cause
    text = first_line(cause if cause is not None else err)
    return ModelError(f"{context + ': ' if context else 'a worker failed: '}{text}")


def _host_port(spec: str) -> bool:
    host, sep, port = spec.rpartition(":")
    return bool(sep and host and port.isdigit())


def _worker_logs_to_stderr() -> bool:
    """Send the lines Ray forwards from workers and raylets to stderr, whatever stream they came
    from. Ray registers its printer when it connects, by module name: replaced before ray.init.
    False (forward nothing) if this Ray has no such printer."""
    try:
        from ray._private import worker as ray_worker
    except ImportError:
        return False
    original = getattr(ray_worker, "print_to_stdstream", None)
    if original is None:
        return False
    if getattr(original, "_aisql_to_stderr", False):
        return True

    def to_stderr(data, ignore_prefix: bool) -> None:
        original({**data, "is_err": True}, ignore_prefix)

    to_stderr._aisql_to_stderr = True  # type: ignore[attr-defined]
    ray_worker.print_to_stdstream = to_stderr
    return True


class _ShardRun:
    """One run_shards call: the shards in flight (by Ray reference), the deaths each shard
    caused, and dispatching to whichever worker is free, on the driver."""

    def __init__(self, pool: "WorkerPool", task, next_shard, put_back, on_result, method: str, extra: tuple) -> None:
        self.pool, self.task, self.method, self.extra = pool, task, method, extra
        self.next_shard, self.put_back, self.on_result = next_shard, put_back, on_result
        self.ray = pool._ray
        self.in_flight: dict[Any, _InFlight] = {}
        self.deaths: dict[int, int] = {}

    def run(self) -> None:
        ray, pool = self.ray, self.pool
        if self.starting():  # replacements that finished loading since the last call join now
            ready, _ = ray.wait([s.starting for s in self.starting()], num_returns=len(self.starting()), timeout=0)
            for slot in [s for s in self.starting() if s.starting in ready]:
                self.join(slot)
        self.dispatch_idle()
        # Replacements still loading are waited for only while no worker is alive: otherwise
        # they join when ready (this call or the next), and the query does not wait for them.
        while self.in_flight or (self.starting() and not any(s.alive for s in pool.slots)):
            waiting = list(self.in_flight) + [s.starting for s in self.starting()]
            (ref,), _ = ray.wait(waiting, num_returns=1)
            flight = self.in_flight.pop(ref, None)
            if flight is None:  # a replacement worker finished loading
                self.join(next(s for s in self.starting() if s.starting == ref))
                self.dispatch_idle()
                continue
            slot = flight.slot
            slot.busy = False
            try:
                result = ray.get(ref)
            except ray.exceptions.RayActorError:
                self.lost(flight)
                continue
            except ray.exceptions.RayTaskError as err:
                raise _cause(err) from None
            self.on_result(flight.token, result, slot.stats.name)
            self.dispatch(slot)
        leftover = self.next_shard("")
        if leftover is not None:
            self.put_back(leftover[0])
            raise ModelError("every worker died and none could be restarted: the query stopped (answers received so far are stored)")

    def lost(self, flight: "_InFlight") -> None:
        """A worker died running a shard: the shard is queued again, unless it has killed
        MAX_SHARD_DEATHS workers in a row (then the query stops)."""
        key = id(flight.token)
        self.deaths[key] = self.deaths.get(key, 0) + 1
        if self.deaths[key] >= MAX_SHARD_DEATHS:
            raise ModelError(
                f"a shard of {len(flight.items)} prompts killed {self.deaths[key]} workers in a row: stopped "
                "(every answer received before is stored)",
                hint="look at the workers' logs (out of memory?); a smaller --checkpoint-every makes smaller shards",
            ) from None
        self.put_back(flight.token)
        self.pool._died(flight.slot)
        self.dispatch_idle()

    def dispatch(self, slot: "_Slot") -> None:
        shard = self.next_shard(slot.stats.name)
        if shard is None:
            return
        token, items = shard
        slot.busy = True
        ref = getattr(slot.handle, self.method).remote(self.task, list(items), *self.extra)
        self.in_flight[ref] = _InFlight(slot, token, items)
        if self.pool.on_dispatch is not None:
            self.pool.on_dispatch(slot.stats.name, slot.handle, len(items))

    def dispatch_idle(self) -> None:
        for slot in self.pool.slots:
            if slot.alive and not slot.busy:
                self.dispatch(slot)

    def join(self, slot: "_Slot") -> None:
        try:
            info = self.ray.get(slot.starting)
        except self.ray.exceptions.RayActorError:  # the replacement could not load its model either
            self.pool._died(slot)
            return
        self.pool._joined(slot, info)

    def starting(self) -> list["_Slot"]:
        return [s for s in self.pool.slots if s.starting is not None]
