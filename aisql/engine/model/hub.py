"""Hugging Face Hub models: the local cache read by its documented layout, the Hub asked only when
a model is not there and the Hub answers (an unreachable Hub remembered for an hour).

Apart from the loader so that every backend that takes a Hub id (the built-in engine, vLLM's
facts, the embedding model) reads it here, and none imports the loader for it.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path

from aisql.engine.model.model_files import first_line
from aisql.errors import ModelError

HUB_PROBE_TIMEOUT_S = 3.0


def hub_snapshot(repo_id: str, weights: bool = True) -> Path:
    """The local snapshot of a Hub model, downloading it if it is not cached and the Hub answers.

    The local cache is read by its documented layout (refs/main -> snapshots/<commit>) without
    importing huggingface_hub's download machinery; an unreachable Hub is remembered for an hour
    (HUB_NEGATIVE_TTL_S), so an offline machine does not wait on a probe at every run."""
    local = cached_snapshot(repo_id, weights)
    if local is not None:
        return local
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        raise ModelError(f"{repo_id} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set")
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    if not _reachable_remembered(endpoint):
        raise ModelError(f"{repo_id} is not in the local Hugging Face cache and {endpoint} is unreachable")
    from huggingface_hub import snapshot_download

    patterns = ["*.json", "*.model", "*.txt", "*.jinja", "*.tiktoken"] + (["*.safetensors"] if weights else [])
    try:
        return Path(snapshot_download(repo_id, allow_patterns=patterns))
    except Exception as err:  # RepositoryNotFoundError, GatedRepoError, HTTP errors
        raise ModelError(f"cannot download {repo_id} from {endpoint}: {type(err).__name__}: {first_line(err)}") from None


HUB_NEGATIVE_TTL_S = 3600.0


def cached_snapshot(repo_id: str, weights: bool) -> Path | None:
    """The Hugging Face cache's snapshot of `repo_id` (its main revision, else the newest), if it
    holds a configuration (and weights, when asked)."""
    folder = _hub_cache() / ("models--" + repo_id.replace("/", "--"))
    snapshots = folder / "snapshots"
    if not snapshots.is_dir():
        return None
    candidates = []
    ref = folder / "refs" / "main"
    if ref.is_file():
        candidates.append(snapshots / ref.read_text().strip())
    candidates += sorted((p for p in snapshots.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    for snapshot in candidates:
        if (snapshot / "config.json").exists() and (not weights or any(snapshot.glob("*.safetensors"))):
            return snapshot
    return None


def _hub_cache() -> Path:
    """Where huggingface_hub keeps models, read from the environment now (its constants are
    fixed when it is first imported)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def _reachable_remembered(endpoint: str) -> bool:
    """`_reachable`, with a negative answer remembered for HUB_NEGATIVE_TTL_S."""
    import json
    import time

    from aisql.paths import cache_root, save_cache_file

    memo = cache_root() / "hub-unreachable.json"
    try:
        seen = json.loads(memo.read_text())
    except (OSError, ValueError):
        seen = {}
    if time.time() - float(seen.get(endpoint, 0)) < HUB_NEGATIVE_TTL_S:
        return False
    if _reachable(endpoint):
        return True
    seen[endpoint] = time.time()
    save_cache_file(memo, json.dumps(seen))
    return False


def _reachable(endpoint: str) -> bool:
    try:
        urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=HUB_PROBE_TIMEOUT_S)
        return True
    except urllib.error.HTTPError:
        return True  # it answered
    except Exception:
        return False
