"""Notices worth saying once a day, not on every run: a newcomer running ten queries in an
afternoon read the same fallback-model warning ten times. Remembered per cache directory (so a
fresh AISQL_CACHE_DIR, a CI job, hears it again), by topic and date."""

from __future__ import annotations

import datetime
import json


def first_today(topic: str) -> bool:
    """True the first time `topic` comes up today in this cache directory (then remembered);
    also True when the cache directory cannot be read or written: better said twice than never."""
    from aisql.paths import cache_root, save_cache_file

    path = cache_root() / "notices.json"
    today = datetime.date.today().isoformat()
    try:
        said = json.loads(path.read_text())
    except (OSError, ValueError):
        said = {}
    if not isinstance(said, dict):
        said = {}
    if said.get(topic) == today:
        return False
    said[topic] = today
    save_cache_file(path, json.dumps(said, indent=1))
    return True
