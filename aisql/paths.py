"""Where aisql keeps files of its own: `AISQL_CACHE_DIR`, else the platform's user cache dir."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import platformdirs


def cache_root() -> Path:
    configured = os.environ.get("AISQL_CACHE_DIR")
    return Path(configured) if configured else Path(platformdirs.user_cache_dir("aisql"))


def save_cache_file(path: Path, text: str) -> bool:
    """Write a small file of the cache (a memo, a profile, a measurement) as one step: into a
    temporary file beside it, then renamed, so a concurrent run reads the old file or the new one,
    never half of one. Best effort: a cache that cannot be written only costs recomputing later, so
    an OSError is swallowed; returns whether the file was written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(temporary, path)
        finally:
            if os.path.exists(temporary):
                os.unlink(temporary)
        return True
    except OSError:
        return False


def build_directory_once(target: Path, build: Callable[[Path], None], what: str) -> Path:
    """Build a directory in the cache (a converted or generated model) as one atomic step: into a
    staging directory beside `target`, then renamed, so a crash never leaves half a model and
    concurrent builders agree (the first rename wins; the others' results are identical)."""
    from aisql.errors import ModelError

    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_abandoned_builds(target)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.{os.getpid()}.", dir=target.parent))
    except OSError as err:
        raise ModelError(f"cannot {what} in {target.parent}: {err.strerror or err}", hint="set AISQL_CACHE_DIR to a writable directory") from None
    try:
        build(staging)
        try:
            os.replace(staging, target)
        except OSError:  # another process finished first
            if not (target / "config.json").exists():
                raise
    except Exception as err:  # noqa: BLE001 - only a full or read-only disk is translated
        reason = _disk_refusal(err)
        if reason is None:
            raise
        raise ModelError(
            f"cannot {what} in {target.parent}: {reason}",
            hint="free disk space, or set AISQL_CACHE_DIR to a disk with room",
        ) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG}


def _disk_refusal(err: BaseException) -> str | None:
    """Why the disk refused a write (None: it did not): an OSError of a full, over-quota or
    read-only disk, or a serializer's own error carrying the OS's words (safetensors: "No space
    left on device (os error 28)")."""
    if isinstance(err, OSError) and err.errno in _DISK_ERRNOS:
        return os.strerror(err.errno).lower()
    return next((os.strerror(code).lower() for code in _DISK_ERRNOS if os.strerror(code) in str(err)), None)


def remove_abandoned_builds(target: Path) -> None:
    """Staging directories of earlier builds of `target` whose process is gone (a kill -9 during a
    GGUF conversion left one of several GB behind, never swept). A live builder's is kept."""
    for staging in target.parent.glob(f".{target.name}.*"):
        pid = staging.name[len(target.name) + 2 :].split(".", 1)[0]
        if staging.is_dir() and pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(staging, ignore_errors=True)


def process_alive(pid: int) -> bool:
    """Whether a process with this id runs (another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
