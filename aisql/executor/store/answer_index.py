"""A node's answers by prompt digest, in a few bytes each: what a streamed node keeps in memory.

A planned node keeps its answers by argument tuple (NodeRuntime.values), which holds every
tuple's strings — fine for thousands of prompts, gigabytes for millions. A node streamed through
a worker pool (aisql.executor.cluster.streaming) keeps instead, per distinct prompt text, a
16-byte digest of the text and a small code for its value and its cost (~28 bytes a prompt),
and per distinct argument tuple its 64-bit DuckDB hash and value code (12 bytes).

The final query asks by argument tuple, a vector at a time. Rendering each row's text again and
digesting it costs microseconds a row in Python, so the final statement passes DuckDB's `hash()`
of the row's VARCHAR arguments (computed by DuckDB as the slices are read, and again by DuckDB in
the final query: aisql.executor.node.tuple_hashes) and its lookups are one vectorised search. That
hash is trusted only if no two tuples of the node share it (`seal_tuples` checks: a node's
tuples are distinct, so a repeated hash is a collision); otherwise the final query renders and
digests each row, and finds its text's answer.

Digests are BLAKE2b-128 of the text: two texts colliding is a 2^-128 event per pair, i.e. never
at any size a node can reach. Keys live in sorted runs (a log-structured merge: a run per shard
of answers, two runs merged when the newer is at least half the older's size, so a key is
copied O(log n) times and a lookup searches O(log n) runs, all vectorised): adding a shard's
answers costs no Python work per key beyond its value's code.
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

import numpy as np

MISSING = object()  # get_many's marker for a digest with no answer


def digest(text: str) -> bytes:
    """The 16-byte key of a prompt text."""
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


class AnswerIndex:
    def __init__(self) -> None:
        self._runs: list[tuple[np.ndarray, ...]] = []  # (digests' high halves sorted, low halves, value codes, costs); older first
        self._count = 0
        self._values: list[Any] = []  # code -> value
        self._code_of: dict[Any, int] = {}  # hashable value -> code (booleans, labels: a handful)
        self._tuple_chunks: list[tuple[np.ndarray, np.ndarray]] = []  # (tuple hashes, value codes) as added
        self._tuple_hashes: np.ndarray | None = None  # sorted, once sealed
        self._tuple_codes: np.ndarray | None = None
        self.tuples_collided = False  # two tuples share a hash (or some came without one): the final query renders instead

    def __len__(self) -> int:
        return self._count

    @property
    def nbytes(self) -> int:
        """Memory of the keys and codes (values aside: for AI.IF a handful of shared objects)."""
        runs = sum(a.nbytes for run in self._runs for a in run)
        tuples = sum(h.nbytes + c.nbytes for h, c in self._tuple_chunks)
        if self._tuple_hashes is not None:
            tuples += self._tuple_hashes.nbytes + self._tuple_codes.nbytes
        return runs + tuples

    @property
    def values(self) -> list[Any]:
        """Value by code."""
        return self._values

    # ---- by prompt digest -------------------------------------------------------------------
    def add_many(self, keys: Sequence[bytes], values: Sequence[Any], costs: Sequence[int]) -> list[int]:
        """Keep each value (and its answer's cost) for its key; a key added again keeps its first
        value — the same text's answer. Returns each key's value code (its first value's)."""
        if not len(keys):
            return []
        high, low = _halves(keys)
        codes = self._codes(values)
        found, _ = self._find(high, low)
        new = np.flatnonzero(found < 0)
        if len(new):
            pairs = np.stack([high[new], low[new]], axis=1)
            _, first = np.unique(pairs, axis=0, return_index=True)  # a key twice in this call: its first
            take = new[np.sort(first)]
            self._push(high[take], low[take], codes[take], np.asarray(costs, dtype=np.int64)[take])
            if len(take) < len(new):  # the later copies get their first value's code
                found, _ = self._find(high, low)
        return np.where(found >= 0, found, codes).tolist()

    def add_new(self, keys: Sequence[bytes], values: Sequence[Any], costs: Sequence[int]) -> list[int]:
        """add_many for keys the caller knows are neither here nor repeated (a streamed node's
        answers: each text is asked once): no search. Returns their value codes."""
        if not len(keys):
            return []
        codes = self._codes(values)
        self._push(*_halves(keys), codes, np.asarray(costs, dtype=np.int64))
        return codes.tolist()

    def entries(self, keys: Sequence[bytes]) -> list[tuple[int, int] | None]:
        """(value code, cost) per key, None where none was added."""
        if not len(keys):
            return []
        codes, costs = self._find(*_halves(keys))
        return [None if c < 0 else (c, s) for c, s in zip(codes.tolist(), costs.tolist())]

    def costs(self, keys: Sequence[bytes]) -> list[int | None]:
        """The answers' costs of `keys`, None where none was added."""
        return [None if e is None else e[1] for e in self.entries(keys)]

    def get_many(self, keys: Sequence[bytes]) -> list[Any]:
        """The values of `keys`, MISSING where none was added."""
        if not len(keys):
            return []
        codes, _ = self._find(*_halves(keys))
        values = self._values
        return [MISSING if c < 0 else values[c] for c in codes.tolist()]

    def __contains__(self, key: bytes) -> bool:
        return self.entries([key])[0] is not None

    def _find(self, high: np.ndarray, low: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Value codes (-1: absent) and costs of the keys (their digests' two 8-byte halves),
        searched run by run, in key order (numpy's binary search resumes from the last find).
        Runs are sorted by the high half; keys sharing one (a 2^-64 event per pair) are found by
        a scan over their equal run."""
        order = np.argsort(high)
        high, low = high[order], low[order]
        codes = np.full(len(high), -1, dtype=np.int64)
        costs = np.zeros(len(high), dtype=np.int64)
        for run_high, run_low, run_codes, run_costs in self._runs:
            at = np.searchsorted(run_high, high)
            inside = np.flatnonzero(at < len(run_high))
            same_high = inside[run_high[at[inside]] == high[inside]]
            hit = same_high[run_low[at[same_high]] == low[same_high]]
            codes[hit] = run_codes[at[hit]]
            costs[hit] = run_costs[at[hit]]
            for i in np.setdiff1d(same_high, hit).tolist():  # the high half shared with another key
                j = int(at[i])
                while j < len(run_high) and run_high[j] == high[i]:
                    if run_low[j] == low[i]:
                        codes[i], costs[i] = run_codes[j], run_costs[j]
                        break
                    j += 1
        out_codes, out_costs = np.empty_like(codes), np.empty_like(costs)
        out_codes[order], out_costs[order] = codes, costs
        return out_codes, out_costs

    def _push(self, high: np.ndarray, low: np.ndarray, codes: np.ndarray, costs: np.ndarray) -> None:
        """A new run (sorted here); merged into the older ones while it is at least half their size."""
        order = np.argsort(high, kind="stable")
        self._count += len(high)
        runs = self._runs
        runs.append((high[order], low[order], codes[order].astype(np.int32), costs[order]))
        while len(runs) > 1 and 2 * len(runs[-1][0]) >= len(runs[-2][0]):
            new, old = runs.pop(), runs.pop()
            at = np.searchsorted(old[0], new[0])
            runs.append(tuple(np.insert(o, at, n) for o, n in zip(old, new)))

    def _codes(self, values: Sequence[Any]) -> np.ndarray:
        code_of = self._code_of
        try:
            return np.array([code_of[v] for v in values], dtype=np.int64)
        except (KeyError, TypeError):  # a value not coded yet, or unhashable
            return np.fromiter((self._code(v) for v in values), dtype=np.int64, count=len(values))

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

    # ---- by argument tuple (the final query) -------------------------------------------------
    def add_tuples(self, hashes: Sequence[int], codes: Sequence[int]) -> None:
        """Tuples (by their DuckDB hash) whose prompt's answer has value code `codes`."""
        if len(hashes):
            self._tuple_chunks.append((np.asarray(hashes, dtype=np.uint64), np.asarray(codes, dtype=np.int32)))

    def seal_tuples(self) -> None:
        """Sort the tuples' hashes for lookups; a hash seen twice marks the map unusable."""
        chunks = self._tuple_chunks
        if self._tuple_hashes is not None:  # sealed before: its tuples are kept
            chunks = [(self._tuple_hashes, self._tuple_codes)] + chunks
        hashes = np.concatenate([h for h, _ in chunks]) if chunks else np.empty(0, dtype=np.uint64)
        codes = np.concatenate([c for _, c in chunks]) if chunks else np.empty(0, dtype=np.int32)
        self._tuple_chunks = []
        order = np.argsort(hashes, kind="stable")
        self._tuple_hashes, self._tuple_codes = hashes[order], codes[order]
        self.tuples_collided |= bool(np.any(self._tuple_hashes[1:] == self._tuple_hashes[:-1]))

    @property
    def sealed(self) -> bool:
        return self._tuple_hashes is not None

    def codes_by_hash(self, hashes: np.ndarray) -> np.ndarray:
        """Each hash's value code, -1 where no tuple of the node has it (sealed index)."""
        sorted_hashes, codes = self._tuple_hashes, self._tuple_codes
        out = np.full(len(hashes), -1, dtype=np.int64)
        if sorted_hashes is None or not len(sorted_hashes):
            return out
        at = np.searchsorted(sorted_hashes, hashes)
        inside = np.flatnonzero(at < len(sorted_hashes))
        hit = inside[sorted_hashes[at[inside]] == hashes[inside]]
        out[hit] = codes[at[hit]]
        return out


def _halves(keys: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """16-byte digests as their two 8-byte halves (numpy compares integers fast, raw bytes not)."""
    pairs = np.frombuffer(b"".join(keys), dtype=np.uint64).reshape(-1, 2)
    return pairs[:, 0].copy(), pairs[:, 1].copy()
