"""Model fingerprints: the identity of a model's numbers, the result cache's model key.

Two runs may share cached answers only if they would compute the same answers, so the key covers
the weights' bytes, the tokenizer and configuration, and the numerics (device type, dtype,
quantization). Weights are identified by content, never by name or size alone (a fine-tuned copy
has the same shapes):
- a file in a Hugging Face cache snapshot links to a blob named by its SHA-256: that name is the hash;
- any other weight file is hashed once and the digest remembered by (path, size, mtime), so a
  multi-GB model is read once per change, not once per run.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from aisql.paths import cache_root, save_cache_file

if TYPE_CHECKING:
    from aisql.engine.options import EngineOptions

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".model")
_SHA256_NAME = re.compile(r"^[0-9a-f]{64}$")
_MEMO_FILE = "weight-digests.json"


def directory_fingerprint(directory: Path) -> str:
    """Identifies config, tokenizer and weights of a model directory by their content."""
    digest = hashlib.sha256()
    for path in sorted(directory.iterdir()):
        if not path.is_file():
            continue
        if path.suffix in _WEIGHT_SUFFIXES:
            digest.update(f"{path.name}:{file_digest(path)}".encode())
        elif path.suffix in (".json", ".txt", ".jinja", ".tiktoken"):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def numerics_suffix(device_type: str, dtype: str, quantize: str | None) -> str:
    """Same weights, other numerics, other answers (a bf16 score may cross a float32 tie)."""
    return f"/{device_type}/{dtype}" + (f"/{quantize}" if quantize else "")


def numerics_of(fingerprint: str) -> str | None:
    """The numerics a fingerprint names (numerics_suffix read back), as outputs say them:
    "bfloat16", "float32 with int8 weights"; None for a fingerprint without them (remote)."""
    parts = fingerprint.split("/")
    if len(parts) < 3:
        return None
    return parts[2] + (f" with {parts[3]} weights" if len(parts) > 3 else "")


def file_digest(path: Path) -> str:
    """SHA-256 of a file's content: the blob name for Hub cache links, else hashed and memoised."""
    resolved = path.resolve()
    if resolved != path.absolute() and _SHA256_NAME.match(resolved.name):
        return resolved.name
    stat = resolved.stat()
    memo_key = f"{resolved}:{stat.st_size}:{stat.st_mtime_ns}"
    memo = _load_memo()
    if memo_key in memo:
        return memo[memo_key]
    hasher = hashlib.sha256()
    with open(resolved, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            hasher.update(block)
    digest = hasher.hexdigest()
    if stat.st_size >= 1 << 20:  # small files are cheaper to hash than to remember
        memo[memo_key] = digest
        _save_memo(memo)
    return digest


def _memo_path() -> Path:
    return cache_root() / _MEMO_FILE


def _load_memo() -> dict[str, str]:
    try:
        return json.loads(_memo_path().read_text())
    except (OSError, ValueError):
        return {}


def _save_memo(memo: dict[str, str]) -> None:
    """Written to a temporary file and renamed: concurrent runs never see half a file."""
    save_cache_file(_memo_path(), json.dumps(memo))  # one that cannot be written only costs a re-hash


def vllm_fingerprint(location: str, options: "EngineOptions") -> str:
    """A local vLLM model is identified by content; a Hub id by name (vLLM resolves its revision)."""
    from aisql.engine.model.numerics import cuda_available

    path = Path(location).expanduser()
    base = directory_fingerprint(path) if path.is_dir() else f"vllm:{location}"
    device = "cuda" if cuda_available() else "cpu"
    dtype = options.dtype if options.dtype != "auto" else ("float32" if device == "cpu" else "auto")
    return base + numerics_suffix(device, dtype, options.quantize)
