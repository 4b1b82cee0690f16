"""A node's answers by prompt digest, in a few bytes each: what a streamed node keeps in memory.

A planned node keeps its answers by argument tuple (NodeRuntime.values), which holds every
tuple's strings — fine for thousands of prompts, gigabytes for millions. A node streamed through
a worker pool (aisql.executor.cluster.streaming) keeps instead, per distinct prompt text, a
16-byte digest of the text and a small code for its value and its cost: ~28 bytes a prompt. The final query's
lookups render each row's text again (the template, microseconds) and find its digest here.

Digests are BLAKE2b-128 of the text: two texts colliding is a 2^-128 event per pair, i.e. never
at any size a node can reach. Keys live in one sorted numpy array plus a small dict of recent
additions, merged into the array when the dict grows past a quarter of it (so the merges cost
O(n log n) in all).
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

import numpy as np

MISSING = object()  # get_many's marker for a digest with no answer
MERGE_AT_LEAST = 65_536  # recent additions kept in a dict before they are merged into the array


def digest(text: str) -> bytes:
    """The 16-byte key of a prompt text."""
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


class AnswerIndex:
    def __init__(self) -> None:
        self._keys = np.empty(0, dtype="V16")  # sorted
        self._codes = np.empty(0, dtype=np.int32)  # value code per key
        self._costs = np.empty(0, dtype=np.int64)  # per key: the answer's logical tokens (Answer.cost)
        self._recent: dict[bytes, tuple[int, int]] = {}  # key -> (code, cost)
        self._values: list[Any] = []  # code -> value
        self._code_of: dict[Any, int] = {}  # hashable value -> code (booleans, labels: a handful)

    def __len__(self) -> int:
        return len(self._keys) + len(self._recent)

    @property
    def nbytes(self) -> int:
        """Memory of the keys and codes (values aside: for AI.IF a handful of shared objects)."""
        return self._keys.nbytes + self._codes.nbytes + self._costs.nbytes + len(self._recent) * 160

    def add_many(self, keys: Sequence[bytes], values: Sequence[Any], costs: Sequence[int]) -> None:
        """Keep each value (and its answer's cost) for its key; a key added again keeps its first
        value — the same text's answer. One vectorised lookup per call: answers come a shard at
        a time."""
        present = self._positions(keys)
        for key, value, cost, at in zip(keys, values, costs, present):
            if at is None and key not in self._recent:
                self._recent[key] = (self._code(value), int(cost))
        if len(self._recent) >= max(MERGE_AT_LEAST, len(self._keys) // 4):
            self._merge()

    def get_many(self, keys: Sequence[bytes]) -> list[Any]:
        """The values of `keys`, MISSING where none was added (the final query's lookups: a
        vector of rows at a time, vectorised over the sorted array)."""
        out: list[Any] = [MISSING] * len(keys)
        values, recent, rest = self._values, self._recent, []
        for i, key in enumerate(keys):
            found = recent.get(key)
            if found is not None:
                out[i] = values[found[0]]
            else:
                rest.append(i)
        if rest and len(self._keys):
            at, hit = self._search([keys[i] for i in rest])
            for i, code in zip(np.asarray(rest)[hit].tolist(), self._codes[at[hit]].tolist()):
                out[i] = values[code]
        return out

    def costs(self, keys: Sequence[bytes]) -> list[int | None]:
        """The answers' costs of `keys`, None where none was added."""
        return [None if at is None else at[1] for at in self._positions(keys)]

    def __contains__(self, key: bytes) -> bool:
        return self._positions([key])[0] is not None

    def _positions(self, keys: Sequence[bytes]) -> list[tuple[int, int] | None]:
        """(code, cost) per key, or None."""
        out: list[tuple[int, int] | None] = [None] * len(keys)
        rest = []
        for i, key in enumerate(keys):
            found = self._recent.get(key)
            if found is not None:
                out[i] = found
            else:
                rest.append(i)
        if rest and len(self._keys):
            at, hit = self._search([keys[i] for i in rest])
            found = zip(np.asarray(rest)[hit].tolist(), self._codes[at[hit]].tolist(), self._costs[at[hit]].tolist())
            for i, code, cost in found:
                out[i] = (code, cost)
        return out

    def _search(self, keys: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """Positions of `keys` in the sorted array, and which of them are there."""
        wanted = np.frombuffer(b"".join(keys), dtype="V16")
        at = np.searchsorted(self._keys, wanted)
        hit = at < len(self._keys)
        hit[hit] = self._keys[at[hit]] == wanted[hit]
        return at, hit

    def _code(self, value: Any) -> int:
        try:
            code = self._code_of.get(value)
        except TypeError:  # an unhashable value (a struct): kept as is
            self._values.append(value)
            return len(self._values) - 1
        if code is None:
            code = self._code_of[value] = len(self._values)
            self._values.append(value)
        return code

    def _merge(self) -> None:
        keys = np.frombuffer(b"".join(self._recent), dtype="V16")
        codes = np.fromiter((c for c, _ in self._recent.values()), dtype=np.int32, count=len(self._recent))
        costs = np.fromiter((c for _, c in self._recent.values()), dtype=np.int64, count=len(self._recent))
        order = np.argsort(keys, kind="stable")
        at = np.searchsorted(self._keys, keys[order])
        self._keys = np.insert(self._keys, at, keys[order])
        self._codes = np.insert(self._codes, at, codes[order])
        self._costs = np.insert(self._costs, at, costs[order])
        self._recent.clear()
