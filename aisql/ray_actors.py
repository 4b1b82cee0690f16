"""What the two pools of Ray actors share — the batch workers (aisql.executor.cluster.pool) and
`aisql serve --replicas` (aisql.serve.replicas): importing Ray with an install hint, starting a
local runtime that keeps its logs off stdout, creating the actor class once, reading a dead or
failed actor's error as one line, and refusing actors that loaded different models.

Each pool keeps its own slots and restarts: the workers' are for shards (a dead worker's shard
goes back to the queue), the replicas' for streams (a dead replica's requests end in an error).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Iterable

from aisql.errors import AisqlError, ModelError
from aisql.extras import install_hint


def import_ray(needed_for: str):
    """Ray, or one AisqlError saying what needs it and how to install it."""
    try:
        import ray
    except ImportError:
        raise AisqlError(f"{needed_for} needs Ray, which is not installed", hint=install_hint("ray")) from None
    return ray


def start_local_runtime(ray, object_store_bytes: int, log_to_driver: bool = False) -> None:
    """A Ray runtime on this machine for this process: every core, no dashboard, Ray's own
    logging at errors only, the workers' lines kept off the driver's stdout (unless the caller
    has sent them to stderr: `log_to_driver`)."""
    ray.init(
        num_cpus=os.cpu_count() or 1,
        include_dashboard=False,
        object_store_memory=object_store_bytes,
        logging_level=logging.ERROR,
        log_to_driver=log_to_driver,
    )


def actor_class(ray, cls: type):
    """`cls` as a Ray actor that is never restarted or retried by Ray (the pools decide)."""
    return ray.remote(max_restarts=0, max_task_retries=0)(cls)


def first_line(err: BaseException) -> str:
    """The line of an actor's error that says what happened (Ray wraps it in a traceback)."""
    text = str(err).strip().splitlines()
    return text[-1] if text else type(err).__name__


def one_model(fingerprints: Iterable[Any], what: str) -> None:
    """Refuse actors that loaded different models (their fingerprints differ)."""
    if len(set(fingerprints)) > 1:
        raise ModelError(f"the {what} loaded different models (fingerprints differ)", hint="give every node the same model files")
