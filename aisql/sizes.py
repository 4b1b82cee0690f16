"""Sizes as people write them ('2GB', '512MiB', '1e9'), for every door that takes one: --kv-budget,
--max-body-size, the dbt plugin's kv_budget."""

from __future__ import annotations

import re

from aisql.errors import AisqlError

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_size(text: str) -> int:
    """'2GB', '512MiB', '1e9' -> bytes."""
    match = re.fullmatch(r"\s*([0-9.eE+]+)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).upper() if match else None
    if not match or unit not in _UNITS:
        raise AisqlError(f"cannot read the size {text!r}", hint="e.g. 512MB, 2GB, 4GiB or a number of bytes")
    try:
        return int(float(match.group(1)) * _UNITS[unit])
    except ValueError:
        raise AisqlError(f"cannot read the size {text!r}", hint="e.g. 512MB, 2GB, 4GiB") from None
