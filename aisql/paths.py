"""Where aisql keeps files of its own: `AISQL_CACHE_DIR`, else the platform's user cache dir."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def cache_root() -> Path:
    configured = os.environ.get("AISQL_CACHE_DIR")
    return Path(configured) if configured else Path(platformdirs.user_cache_dir("aisql"))
