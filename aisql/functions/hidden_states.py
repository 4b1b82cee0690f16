"""How a scored prompt's hidden state is kept: the model's final (post-norm) hidden state at the
position where the answer starts, packed as little-endian float16 bytes.

That vector is what the output head reads to score Yes / No or a label, so the scoring pass
already computes it; labelled examples fit a probe on it (aisql.functions.probe). It is kept in
the result cache beside the labels' log-probabilities, so a changed set of examples asks the
model nothing. float16 halves the bytes of float32 (576 features: 1,152 bytes a prompt for
SmolLM2-135M, 1,792 for Qwen2.5-0.5B) and, measured on the labelled tasks (RESULTS.md §34), moves
no probe's balanced accuracy; rounding also makes the batched and the one-prompt passes (which
differ by float noise) give the same bytes nearly always, so the planned and the naive run fit
the same probe.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

_DTYPE = np.dtype("<f2")
_LIMIT = float(np.finfo(np.float16).max)
MAX_STATE_BYTES = 2 * 16384  # a stored state larger than a 16k-wide model's is not one aisql wrote


def pack_state(vector) -> bytes:
    """A float vector as the bytes kept (float16; values beyond its range clipped, not inf)."""
    array = np.clip(np.asarray(vector, dtype=np.float32).reshape(-1), -_LIMIT, _LIMIT)
    return array.astype(_DTYPE).tobytes()


def unpack_states(states: Sequence[bytes]) -> np.ndarray:
    """Stored states as one float32 matrix, a row per state (all of one width)."""
    if not states:
        return np.zeros((0, 0), dtype=np.float32)
    return np.stack([np.frombuffer(s, dtype=_DTYPE) for s in states]).astype(np.float32)


def valid_state(value: object) -> bool:
    """Whether a value read back from a cache entry is a state `pack_state` could have written."""
    return isinstance(value, bytes) and 0 < len(value) <= MAX_STATE_BYTES and len(value) % _DTYPE.itemsize == 0 and bool(
        np.isfinite(np.frombuffer(value, dtype=_DTYPE)).all()
    )
