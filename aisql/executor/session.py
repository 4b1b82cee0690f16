"""One model and one result cache, shared by everything that asks questions through them.

A `Connection` runs planned queries through a session; `aisql.register` puts DuckDB functions on
a user's own connection that ask through one. Sharing a session shares the loaded weights, the
engine's prefix KV cache and the result cache, and decides the model's identity (its fingerprint,
the result cache's key) once.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from aisql.engine.base import Engine, ModelFacts
from aisql.engine.model.loader import import_runtime, load_model_facts, load_resolved
from aisql.engine.model.resolving import ResolvedModel, resolve_model, resolve_model_spec
from aisql.engine.options import EngineOptions
from aisql.engine.model.numerics import cuda_available
from aisql.errors import AisqlWarning, ModelError
from aisql.executor.store.answer_store import AnswerStore
from aisql.executor.store.cache import open_answer_store

if TYPE_CHECKING:
    from aisql.executor.answers.answering import Answering, RunOptions


@dataclass(frozen=True)
class ModelUsed:
    """The model a run's answers came from — loaded, or known by fingerprint from the cache."""

    name: str
    note: str | None  # test model, quantization: said wherever its answers go
    device: str | None  # None: not loaded, every answer came from the result cache
    numerics: str | None = None  # the dtype the answers were computed in (e.g. "bfloat16"), loaded or cached
    threads: int | None = None  # CPU threads the engine computes with now (None: not a CPU engine, or not loaded)
    kernels: str | None = None  # a matmul kernel other than PyTorch's default ("oneDNN linear"), when loaded


class ModelSession:
    def __init__(
        self,
        model: str | None = None,
        *,
        engine: Engine | None = None,
        engine_options: EngineOptions = EngineOptions(),
        cache: bool | str | os.PathLike = True,
        store: AnswerStore | None = None,
        warn: Callable[[str], None] | None = None,
        embed_model: str | None = None,
        cluster=None,
    ) -> None:
        """`embed_model`: the embedding model of AI.EMBED / AI.SIMILARITY (aisql.engine.backends.embedding).
        `cache`: True keeps answers in the default result cache (aisql.executor.store.cache), a path
        keeps them there, False only for this session's life. `store` overrides it. `cluster`:
        run the model on a pool of Ray workers (aisql.executor.cluster.pool.ClusterOptions);
        None: in this process."""
        self.model_spec = model
        self.engine_options = engine_options
        self.lock = threading.RLock()  # one engine call at a time (DuckDB calls functions from several threads)
        self._engine = engine
        self._given_engine = engine  # the caller's: kept by unload (it cannot be loaded again from a spec)
        self._warned: set[str] = set()
        self._warn_to = warn
        self.store: AnswerStore = store if store is not None else open_answer_store(cache, warn=lambda m: self._warn(m, once=False))
        self._resolved: ResolvedModel | None = None
        self._resolved_for_facts: ResolvedModel | None = None
        self._facts: ModelFacts | None = None
        self._fingerprint: str | None = None
        self.load_s: float | None = None  # how long this session's model took to load (None: not loaded here)
        self.ready_at: float | None = None  # when the engine was ready (time.perf_counter)
        self.startup_s: float = 0.0  # imports, a GGUF conversion and the load, before the first answer
        self.embed_model_spec = embed_model
        self._embedding_ref = None
        self._embedder = None
        self.cluster = cluster
        self._pool = None
        self._proxy_sessions: dict[str, ModelSession] = {}  # approximate mode's proxy LLMs, by spec

    @classmethod
    def from_options(cls, model: str | None = None, **options) -> ModelSession:
        """Engine options (EngineOptions' fields: device, kv_budget, quantize, ...) and session
        options (engine, cache, store, warn) as one flat set of keywords, as aisql.connect and
        aisql.register take them."""
        fields = EngineOptions.__dataclass_fields__
        engine_options = EngineOptions(**{k: options.pop(k) for k in list(options) if k in fields})
        cluster, workers = options.pop("cluster", None), options.pop("workers", None)
        if cluster is not None or workers is not None:
            from aisql.executor.cluster.pool import ClusterOptions

            options["cluster"] = ClusterOptions.from_user(cluster, workers)
        return cls(model, engine_options=engine_options, **options)

    @property
    def loaded(self) -> bool:
        return self._engine is not None

    @property
    def engine(self) -> Engine:
        """The engine, loaded on first use (work answered from the cache never loads a model)."""
        with self.lock:
            if self._engine is None:
                began = time.perf_counter()
                imports_s = _timed(import_runtime) if self.cluster is None and self.resolved_model.backend in ("hf", "gguf") else 0.0
                self._convert_once()  # before the load is timed; imports above: part of every load
                started = time.perf_counter()
                self._engine = self._start_workers() if self.cluster is not None else load_resolved(self.resolved_model, self.engine_options, notify=self._notice)
                self.load_s = imports_s + time.perf_counter() - started
                # what the node that needed the engine spent before its first answer (imports,
                # conversion, load): not its answering speed (aisql.executor.estimates.throughput)
                self.ready_at, self.startup_s = time.perf_counter(), time.perf_counter() - began
            return self._engine

    def _convert_once(self) -> None:
        """A GGUF model's one-off conversion, done before the load is timed: the load time kept
        for explain (aisql.executor.estimates.throughput) is what every later run pays, not the first
        run's conversion (was: "model load ~66 s" remembered for a 4 s load)."""
        model = self.resolved_model
        if self.cluster is None and model.backend == "gguf":
            from aisql.engine.model.gguf import convert

            convert(Path(model.location), self._notice)

    def _start_workers(self) -> Engine:
        """The pool of engine workers (Ray actors, one model each) behind a ClusterEngine: the
        driver keeps only the tokenizer. Workers stay up until `close`."""
        from aisql.executor.cluster.engine import ClusterEngine

        facts = self.facts()
        pool = self._worker_pool()
        try:
            pool.start()
        except BaseException:
            pool.close()
            self._pool = None
            raise
        return ClusterEngine(pool, facts)

    def _worker_pool(self):
        """The (not yet started) pool of this session's cluster, connected to Ray."""
        if self._pool is None:
            from aisql.executor.cluster.pool import WorkerPool

            model = self.resolved_model
            self._pool = WorkerPool(self.cluster, model, self.engine_options, model.fingerprint)
            self._pool.connect()
        return self._pool

    @property
    def pool(self):
        """The worker pool, when this session runs on one and has started it."""
        return self._pool if self._pool is not None and self._pool.slots else None

    def close(self) -> None:
        """Stop this session's workers (a later call starts them again); a local engine stays."""
        with self.lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None
                self._engine = None
                self._fingerprint = None

    def unload(self) -> None:
        """Stop workers and free the loaded models (the oracle's engine, the proxies') now, rather
        than when the session is collected: a script that runs one large model after another
        needs the memory back. A later call loads them again; an engine given to the session stays."""
        self.close()
        with self.lock:
            self._engine = self._given_engine
            for proxy in self._proxy_sessions.values():
                proxy.unload()
            self._proxy_sessions.clear()

    @property
    def resolved_model(self) -> ResolvedModel:
        """Which model this session means, decided once (without loading it)."""
        if self._resolved is None:
            self._resolved = resolve_model(self.model_spec, self._warn)
        return self._resolved

    def facts(self) -> ModelFacts:
        """The model's prompt format and shape for planning: from the engine when it is loaded,
        else without weights or torch (aisql.engine.model.facts) — a cached rerun loads neither."""
        if self._engine is not None:
            return self._engine.facts()
        if self._facts is None:
            self._facts = load_model_facts(self.model_for_planning(), self.engine_options)
        return self._facts

    def model_for_planning(self) -> ResolvedModel:
        """The resolved model where its configuration and tokenizer are enough (explain): a Hub
        model's weights are not fetched for it."""
        if self._resolved is not None:
            return self._resolved
        if self._resolved_for_facts is None:
            self._resolved_for_facts = resolve_model(self.model_spec, self._warn, weights=False)
        return self._resolved_for_facts

    def model_name(self) -> str:
        """The model this session's runs use, by name: resolved (from local files only, nothing
        loaded), so explain names the model the run will use — the default's fallback included."""
        name, is_default = resolve_model_spec(self.model_spec)
        if not is_default:  # as the user gave it (a Hub model is not fetched to be named)
            return name
        try:
            return self.resolved_model.name
        except ModelError:  # the run says why
            return name

    def default_hardware(self) -> str:
        """The cost profile of this machine's kind (torch is asked only where a GPU may exist)."""
        return "h100" if cuda_available() else "cpu"

    def _warn(self, message: str, once: bool = True) -> None:
        """Say (once, unless `once` is False: a count of cache entries recomputed) what changes
        the meaning or cost of results (a fallback model): through the caller's callback (the
        CLI prints a line), else as a Python warning."""
        if once and message in self._warned:
            return
        self._warned.add(message)
        if self._warn_to is not None:
            self._warn_to(message)
        else:
            warnings.warn(message.removeprefix("warning: "), AisqlWarning, stacklevel=4)

    def _notice(self, message: str) -> None:
        """Progress of a slow first load (a GGUF conversion): stderr, or the caller's callback."""
        if self._warn_to is not None:
            self._warn_to(message)
        else:
            print(message, file=sys.stderr)

    def answering(self, options: "RunOptions | None" = None) -> "Answering":
        """This model's way to answers for one run: the engine (loaded on first need), the result
        cache, the engine lock and the fingerprint, with the run's options."""
        from aisql.executor.answers.answering import Answering, LocalChunks, RunOptions

        runner = LocalChunks()
        if self.cluster is not None:  # the way prompts reach the model, chosen once per session
            from aisql.executor.cluster.sharded import PoolShards

            runner = PoolShards()
        return Answering(
            lambda: self.engine,
            self.store,
            self.lock,
            self.fingerprint,
            options or RunOptions(),
            runner=runner,
            reads_states=self.reads_states,
        )

    def reads_states(self) -> bool:
        """Whether this model's engine returns the hidden states a probe is fitted on: the built-in
        engine (in process or on Ray workers) does; vLLM and remote servers do not. Decided from
        the spec, without loading the model (a cached rerun loads none)."""
        if self._given_engine is not None:
            return bool(getattr(self._given_engine, "reads_states", False))
        return self.resolved_model.backend in ("hf", "gguf")

    def fingerprint(self) -> str:
        """The model's identity in the result cache: weights, tokenizer, numerics."""
        if self._fingerprint is None:
            if self._engine is not None:
                self._fingerprint = self._engine.info.fingerprint
            elif self.cluster is not None:  # the workers' numerics (cuda on GPU workers)
                options = self.engine_options
                if options.device == "auto" and (self.cluster.address is not None or _ray_running()):
                    options = self._worker_pool().worker_options  # a cluster's devices: ask Ray
                # else a local runtime: its workers see this machine's devices, as "auto" does here
                self._fingerprint = self.resolved_model.fingerprint(options)
            else:
                self._fingerprint = self.resolved_model.fingerprint(self.engine_options)
        return self._fingerprint

    def known_fingerprint(self) -> str | None:
        """The fingerprint when it is known without measuring anything (explain): None the first
        time `--dtype auto` meets this model on this CPU kind, before a run has measured it."""
        if self._fingerprint is not None or self._engine is not None or self.cluster is not None:
            return self.fingerprint()
        return self.resolved_model.fingerprint(self.engine_options, measure=False)

    # ---- approximate mode's proxy LLM ----------------------------------------------------------
    def choose_proxy(self, requested: str):
        """Which proxy a cascade uses for `requested` ("auto", "embeddings", a model spec), and why."""
        from aisql.errors import AisqlError
        from aisql.executor.approximate.proxy_choice import choose_proxy

        def oracle_params() -> int | None:
            try:
                return self.facts().profile.params
            except AisqlError:
                return None

        return choose_proxy(requested, self.model_name(), oracle_params)

    def proxy_session(self, spec: str) -> "ModelSession":
        """A session for the proxy LLM: its own engine and fingerprint, this session's result
        cache (the proxy's answers are kept under its own key, never the oracle's) and options."""
        if spec not in self._proxy_sessions:
            self._proxy_sessions[spec] = ModelSession(spec, engine_options=self.engine_options, store=self.store, warn=self._warn_to)
        return self._proxy_sessions[spec]

    # ---- the embedding model: resolved from files, loaded on first need ---------------------
    def embedding_model(self):
        """The embedding model this session means (directory, vector size, fingerprint): no torch."""
        if self._embedding_ref is None:
            from aisql.engine.backends.embedding import resolve_embed_model

            self._embedding_ref = resolve_embed_model(self.embed_model_spec)
        return self._embedding_ref

    def embedder(self):
        """The loaded embedding model (sentence-transformers), loaded once per session."""
        with self.lock:
            if self._embedder is None:
                from aisql.engine.backends.embedding import load_embedder

                self._embedder = load_embedder(self.embedding_model())
            return self._embedder

    def model_used(self) -> ModelUsed:
        if self._engine is not None:
            info = self._engine.info
            governor = getattr(self._engine, "threads", None)
            numerics = info.dtype + (f" with {info.quantization} weights" if info.quantization else "")
            threads = governor.threads if governor is not None else None
            return ModelUsed(info.name, info.note, info.device, numerics, threads, getattr(info, "kernels", None))
        from aisql.engine.model.numerics import quantization_note

        resolved = self.resolved_model
        quantize = self.engine_options.quantize
        notes = [n for n in (resolved.note, quantize and quantization_note(quantize)) if n]
        from aisql.engine.model.fingerprint import numerics_of

        return ModelUsed(resolved.name, "; ".join(notes) or None, None, numerics_of(self._fingerprint) if self._fingerprint else None)


def _ray_running() -> bool:
    """Has this process joined a Ray runtime already (ray.init by the user)? Without importing Ray."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def _timed(work) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started
