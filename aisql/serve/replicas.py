"""`aisql serve --replicas N`: N engines, each a Ray actor, behind the one HTTP edge.

Why Ray actors behind the existing edge rather than Ray Serve: the edge already is the product's
OpenAI API (strict parsing, limits, keys, streaming, disconnects; aisql.serve.app), and one edge
makes keys and limits global by construction; the router needs the prompt's token ids, which the
edge computes anyway; Ray Serve would add a controller and proxy actors (and fastapi) for what
one process and N actors do. Ray gives the part we should not write: processes on one machine
or a cluster, placement by CPUs/GPUs, streaming generators between processes, death detection.

Each replica (`ReplicaWorker`, a plain class wrapped by `ray.remote`) loads the model and runs
the same continuous-batching `ServingEngine` as a single server, with the same KV budget. A
request goes where the router (aisql.serve.routing) says; its events stream back through a Ray
streaming generator, batched per wake-up. A replica that dies fails only the requests it was
running (each gets an error event), the router forgets its cache and stops sending to it, and a
replacement actor is started in its slot (at most `max_restarts` per slot) and routed to once its
model has loaded.

The edge keeps no model weights: its tokenizer is loaded from the model's files and its
ModelInfo is the first replica's.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from aisql.engine.base import ModelInfo
from aisql.engine.continuous import FinishEvent, ServeRequest, TokenEvent
from aisql.engine.continuous.request import RequestTimes, Sink
from aisql.engine.model.resolving import ResolvedModel, on_this_node
from aisql.engine.options import EngineOptions
from aisql.ray_actors import actor_class, first_line, import_ray, one_model, start_local_runtime
from aisql.errors import AisqlError, ModelError
from aisql.serve.routing import BLOCK_TOKENS, DEFAULT_IMBALANCE, NoReplica, ReplicaState, RouteRequest, make_router

OBJECT_STORE_BYTES = 128 << 20  # events are small; the store's floor is ~75 MB


@dataclass(frozen=True)
class ReplicaInfo:
    model: ModelInfo
    host: str
    pid: int
    load_s: float
    kv_tokens: int  # how many tokens of KV its prefix cache holds (the router's picture is this big)
    threads: int | None


class ReplicaWorker:
    """One engine and its serving loop, in a Ray actor's process (a plain class: testable without Ray)."""

    def __init__(self, model: ResolvedModel, options: EngineOptions, serving: dict, threads: int | None = None) -> None:
        """`model`: the model `aisql serve` resolved (as on_this_node finds it on this node)."""
        if threads:
            import torch

            torch.set_num_threads(threads)
        from aisql.engine.continuous import ServingEngine
        from aisql.engine.model.loader import load_resolved

        started = time.perf_counter()
        engine = load_resolved(on_this_node(model), options)
        self.serving = ServingEngine(engine, **serving)
        self.threads = threads
        self.load_s = time.perf_counter() - started

    async def describe(self) -> ReplicaInfo:
        engine = self.serving.engine
        kv_tokens = engine.kv_budget_bytes // max(1, self.serving.runner.bytes_per_token)
        return ReplicaInfo(engine.info, socket.gethostname(), os.getpid(), round(self.load_s, 3), kv_tokens, self.threads)

    async def generate(self, request: ServeRequest):
        """The request's events as they come, a list per wake-up (fewer objects than one per token)."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        handle = self.serving.submit(request, lambda event: loop.call_soon_threadsafe(queue.put_nowait, event))
        try:
            while True:
                events = [await queue.get()]
                while not queue.empty():
                    events.append(queue.get_nowait())
                yield events
                if isinstance(events[-1], FinishEvent):
                    return
        finally:
            if not handle.finished:
                handle.cancel()  # the client went away (the edge cancelled this generator)

    async def stats(self) -> dict:
        s = self.serving.stats
        return {
            "prompt_tokens": s.prompt_tokens,
            "prefix_hit_tokens": s.prefix_hit_tokens,
            "generated_tokens": s.generated_tokens,
            "draft_tokens": s.draft_tokens,
            "draft_accepted_tokens": s.draft_accepted_tokens,
            "decode_passes": s.decode_passes,
            "finished": s.finished,
            "cancelled": s.cancelled,
            "running": s.running,
            "waiting": s.waiting,
            "kv_cached_bytes": self.serving.engine.stats.kv_cached_bytes,
        }

    async def until_dead(self) -> None:
        """Never returns: the edge awaits it, and learns of the process's death when it fails."""
        await asyncio.Event().wait()


class PoolHandle:
    """What the edge keeps of a routed request: cancel() and its timings as the edge saw them."""

    def __init__(self, request: ServeRequest, replica: str | None) -> None:
        self.request = request
        self.replica = replica
        self.times = RequestTimes(time.perf_counter())
        self.task: asyncio.Task | None = None
        self.generator = None
        self.finished = False

    def cancel(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()


@dataclass
class _Slot:
    state: ReplicaState
    actor: Any = None
    generation: int = 0  # which actor of this slot (restarts make new ones)
    restarts: int = 0
    deaths: int = 0
    routed: int = 0
    info: ReplicaInfo | None = None
    stats: dict = field(default_factory=dict)
    watcher: asyncio.Task | None = None


class ReplicaPool:
    """N replicas and the router in front of them; what OpenAIServer submits to instead of one ServingEngine."""

    def __init__(
        self,
        model: ResolvedModel,
        options: EngineOptions,
        *,
        replicas: int,
        routing: str = "cache-aware",
        imbalance: int = DEFAULT_IMBALANCE,
        serving: dict | None = None,
        threads: int | None = None,
        max_restarts: int = 3,
    ) -> None:
        if replicas < 1:
            raise AisqlError(f"--replicas must be at least 1, got {replicas}")
        self.model = model
        self.options = options
        self.count = replicas
        self.policy = routing
        self.imbalance = imbalance
        self.serving_options = serving or {}
        self.threads = threads
        self.max_restarts = max_restarts
        self.slots = [_Slot(ReplicaState(f"r{i}")) for i in range(replicas)]
        self.router = None
        self.info: ModelInfo | None = None
        self._ray = None
        self._owns_runtime = False
        self._remote = None
        self._tasks: set[asyncio.Task] = set()

    # ---- life ---------------------------------------------------------------------------------
    def start(self) -> ModelInfo:
        """Start the runtime and every replica; return once all have loaded the model (one clear
        error if one cannot)."""
        ray = import_ray("aisql serve --replicas")
        if not ray.is_initialized():
            cpus = os.cpu_count() or 1
            need = self.count * (self.threads or 1)
            if need > cpus:
                raise AisqlError(
                    f"{self.count} replicas x {self.threads or 1} threads need {need} CPUs and this machine has {cpus}",
                    hint=f"ask for at most {max(1, cpus // (self.threads or 1))} replicas, or fewer --threads",
                )
            start_local_runtime(ray, OBJECT_STORE_BYTES)
            self._owns_runtime = True
        self._ray = ray
        self._remote = actor_class(ray, ReplicaWorker)
        for slot in self.slots:
            self._launch(slot)
        infos = []
        for slot in self.slots:
            try:
                infos.append(ray.get(slot.actor.describe.remote()))
            except ray.exceptions.RayTaskError as err:
                self.close()
                raise ModelError(
                    f"replica {slot.state.name} could not load the model: {first_line(getattr(err, 'cause', err))}"
                ) from None
            except ray.exceptions.RayActorError as err:
                self.close()
                raise ModelError(f"replica {slot.state.name} could not start: {first_line(err)}") from None
        try:
            one_model((info.model.fingerprint for info in infos), "replicas")
        except ModelError:
            self.close()
            raise
        for slot, info in zip(self.slots, infos):
            slot.info, slot.state.alive = info, True
        self.info = infos[0].model
        block_capacity = [max(1, info.kv_tokens // BLOCK_TOKENS) for info in infos]
        self.router = make_router(self.policy, [s.state for s in self.slots], block_capacity, self.imbalance)
        return self.info

    def _launch(self, slot: _Slot) -> None:
        slot.actor = self._remote.options(num_cpus=self.threads or 1).remote(
            self.model, self.options, self.serving_options, self.threads
        )
        slot.generation += 1
        slot.state.alive = False
        slot.state.load = 0

    def start_watching(self) -> None:
        """In the server's event loop: learn of each replica's death as it happens."""
        for index, slot in enumerate(self.slots):
            if slot.watcher is None and slot.state.alive:
                slot.watcher = self._spawn(self._watch(index, slot.generation))

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        ray = self._ray or import_ray("aisql serve --replicas")
        for slot in self.slots:
            if slot.actor is not None:
                with contextlib.suppress(Exception):  # already gone
                    ray.kill(slot.actor)
                slot.actor = None
        if self._owns_runtime and ray.is_initialized():
            ray.shutdown()
        self._ray = None

    # ---- requests (in the server's event loop) -------------------------------------------------
    @property
    def ready(self) -> int:
        return sum(1 for s in self.slots if s.state.alive)

    def submit(self, request: ServeRequest, sink: Sink, session: str | None = None) -> PoolHandle:
        route = RouteRequest(request.prompt_ids, request.cache_salt, session)
        try:
            index = self.router.choose(route)
        except NoReplica:
            handle = PoolHandle(request, None)
            error = FinishEvent(
                "error", len(request.prompt_ids), 0, 0, error=f"no replica is ready ({self._restarting()} restarting)"
            )
            asyncio.get_running_loop().call_soon(sink, error)
            return handle
        slot = self.slots[index]
        handle = PoolHandle(request, slot.state.name)
        slot.state.load += 1
        slot.routed += 1
        self.router.sent(index, route)
        handle.task = self._spawn(self._drive(index, slot.generation, handle, sink, route))
        return handle

    async def _drive(self, index: int, generation: int, handle: PoolHandle, sink: Sink, route: RouteRequest) -> None:
        ray, slot = self._ray, self.slots[index]
        request = handle.request
        outputs: list[int] = []
        generator = slot.actor.generate.options(num_returns="streaming").remote(request)
        handle.generator = generator
        try:
            async for ref in generator:
                for event in await ref:
                    now = time.perf_counter()
                    if isinstance(event, TokenEvent):
                        if handle.times.first_token is None:
                            handle.times.first_token = now
                        handle.times.token_times.extend([now] * len(event.token_ids))
                        outputs.extend(event.token_ids)
                    else:
                        handle.finished = True
                        if event.finish_reason in ("stop", "length"):
                            self.router.finished(index, list(request.prompt_ids) + outputs, request.cache_salt)
                    sink(event)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):  # already finished or gone
                ray.cancel(generator)
            raise
        except ray.exceptions.RayActorError as err:
            handle.finished = True
            sink(
                FinishEvent(
                    "error", len(request.prompt_ids), 0, len(outputs), error=f"replica {slot.state.name} died: {first_line(err)}"
                )
            )
            self._died(index, generation)
        except ray.exceptions.RayTaskError as err:
            handle.finished = True
            sink(FinishEvent("error", len(request.prompt_ids), 0, len(outputs), error=first_line(getattr(err, "cause", err))))
        finally:
            self.router.done(route)
            if slot.generation == generation:
                slot.state.load = max(0, slot.state.load - 1)

    # ---- deaths and replacements ----------------------------------------------------------------
    async def _watch(self, index: int, generation: int) -> None:
        ray = self._ray
        try:
            await self.slots[index].actor.until_dead.remote()
        except ray.exceptions.RayActorError:
            self._died(index, generation)

    def _died(self, index: int, generation: int) -> None:
        slot = self.slots[index]
        if slot.generation != generation:
            return  # this actor's death was already handled
        slot.deaths += 1
        slot.state.alive = False
        self.router.forget(index)
        if slot.watcher is not None:
            slot.watcher.cancel()
            slot.watcher = None
        if slot.restarts >= self.max_restarts:
            slot.actor = None
            slot.generation += 1
            return
        slot.restarts += 1
        self._launch(slot)
        self._spawn(self._join(index, slot.generation))

    async def _join(self, index: int, generation: int) -> None:
        ray, slot = self._ray, self.slots[index]
        try:
            info = await slot.actor.describe.remote()
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError):
            self._died(index, generation)
            return
        if slot.generation != generation:
            return  # replaced meanwhile
        if info.model.fingerprint != self.info.fingerprint:  # not the model the others serve: never routed to
            with contextlib.suppress(Exception):
                ray.kill(slot.actor)
            self._died(index, generation)
            return
        slot.info, slot.state.alive = info, True
        slot.watcher = self._spawn(self._watch(index, generation))

    def _restarting(self) -> int:
        return sum(1 for s in self.slots if not s.state.alive and s.actor is not None)

    def _spawn(self, coroutine) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ---- what /metrics and /health say ----------------------------------------------------------
    async def refresh(self) -> None:
        """Each live replica's counters (a remote call each, concurrently)."""
        ray = self._ray
        live = [(slot, slot.actor.stats.remote()) for slot in self.slots if slot.state.alive]
        for slot, ref in live:
            with contextlib.suppress(ray.exceptions.RayActorError, ray.exceptions.RayTaskError):  # a death: its watcher's
                slot.stats = await ref

    def describe(self) -> str:
        return f"{self.count} replicas ({self.policy} routing)"


def model_front(tokenizer_directory: str, info: ModelInfo):
    """What the edge needs of the model without its weights: tokenizer, prompt format, info."""
    from transformers import AutoTokenizer

    from aisql.engine.model.prompt_format import PromptFormat

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_directory)
    return ModelFront(tokenizer, info, PromptFormat(tokenizer))


@dataclass(frozen=True)
class ModelFront:
    tokenizer: Any
    info: ModelInfo
    format: Any


def start_pool(resolved: ResolvedModel, options: EngineOptions, **pool_options) -> tuple[ReplicaPool, ModelFront]:
    """Start the replicas of the resolved model (handed to each, resolved once) and the edge's front.
    On CPU without --threads, each replica gets an equal share of the cores."""
    from pathlib import Path

    directory = resolved.location
    if resolved.backend == "gguf":  # converted once here, before the replicas look for the conversion
        from aisql.engine.model.gguf import convert

        directory = str(convert(Path(resolved.location)))
    if pool_options.get("threads") is None and options.device in ("auto", "cpu"):
        pool_options["threads"] = max(1, (os.cpu_count() or 1) // pool_options["replicas"])
    if pool_options.get("threads") and options.threads is None:
        # fixed per replica: each engine's thread governor would otherwise see the machine's idle
        # cores as its own, and N replicas would oversubscribe them
        options = dataclasses.replace(options, threads=pool_options["threads"])
    pool = ReplicaPool(resolved, options, **pool_options)
    info = pool.start()
    try:
        return pool, model_front(directory, info)
    except Exception:
        pool.close()
        raise
