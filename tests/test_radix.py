"""Radix KV cache invariants, checked on random operation sequences (hypothesis).

Fake KV tensors hold the token ids themselves, so every split and gather can be checked for
content: the KV read back for a prefix must spell exactly that prefix.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aisql.engine.kv.radix import RadixCache

LAYERS = 2
BYTES_PER_TOKEN = 16


def fake_kv(tokens) -> list:
    t = torch.tensor(tokens, dtype=torch.float32).view(1, -1, 1)
    return [(t.clone(), t.clone() + 0.5) for _ in range(LAYERS)]


def spelled(kv) -> list[int]:
    return [int(x) for x in kv[0][0][0, :, 0].tolist()]


def check_invariants(cache: RadixCache) -> None:
    used = 0
    for node in cache.nodes():
        if node.kv is not None:
            used += len(node.tokens) * BYTES_PER_TOKEN
            assert spelled(node.kv) == list(node.tokens)
            # Path-closed: a cached node's ancestors are cached.
            parent = node.parent
            while not parent.is_root:
                assert parent.kv is not None
                parent = parent.parent
        for first, child in node.children.items():
            assert child.tokens[0] == first and child.start == node.end
    assert used == cache.used_bytes <= cache.budget_bytes
    # The evictable set the cache keeps incrementally is exactly the KV leaves.
    leaves = {n for n in cache.nodes() if n.kv is not None and not any(c.kv is not None for c in n.children.values())}
    assert cache._kv_leaves == leaves


prompts = st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=12), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(prompts=prompts, budget_tokens=st.integers(0, 60), data=st.data())
def test_insert_store_match_evict(prompts, budget_tokens, data):
    cache = RadixCache(budget_bytes=budget_tokens * BYTES_PER_TOKEN, bytes_per_token=BYTES_PER_TOKEN)
    for prompt in prompts:
        chain = cache.insert(prompt)
        assert [t for n in chain for t in n.tokens] == prompt
        locked = cache.deepest_cached(chain) if data.draw(st.booleans()) else None
        if locked is not None:
            cache.lock(locked)
        before = {id(n) for n in cache.nodes() if n.kv is not None and n.pins}
        inserted = cache.insert_kv(chain, lambda start, end: fake_kv(prompt[start:end]))
        assert inserted.complete == all(n.kv is not None for n in chain)
        # Locked KV is never evicted.
        assert before <= {id(n) for n in cache.nodes() if n.kv is not None}
        if locked is not None:
            cache.unlock(locked)
        assert all(n.pins == 0 for n in cache.nodes())
        check_invariants(cache)
        # The longest cached prefix: read back, it spells the prompt's beginning.
        match = cache.match_prefix(prompt)
        if match.length:
            assert spelled(cache.gather(match.node, match.length)) == prompt[: match.length]
        # Splits by later inserts keep earlier KV intact.
        for other in prompts:
            match = cache.match_prefix(other)
            if match.length:
                assert spelled(cache.gather(match.node, match.length)) == other[: match.length]
    cache.evict(cache.used_bytes)
    assert cache.used_bytes == 0 and all(n.kv is None for n in cache.nodes())
    check_invariants(cache)


def test_least_recently_used_policy():
    from aisql.engine.kv.eviction import LeastRecentlyUsed

    cache = RadixCache(budget_bytes=4 * BYTES_PER_TOKEN, bytes_per_token=BYTES_PER_TOKEN, policy=LeastRecentlyUsed())
    old, new = cache.insert([1, 2]), cache.insert([3, 4])
    cache.insert_kv(old, lambda s, e: fake_kv([1, 2][s:e]))
    cache.insert_kv(new, lambda s, e: fake_kv([3, 4][s:e]))
    old[0].pending = 5  # an expected-reuse policy would keep it; least-recently-used does not
    (extra,) = cache.insert([5, 6])
    assert cache.store(extra, fake_kv([5, 6]))
    assert old[0].kv is None and new[0].kv is not None


def test_kv_segments_read_a_path_in_place():
    cache = RadixCache(budget_bytes=100 * BYTES_PER_TOKEN, bytes_per_token=BYTES_PER_TOKEN)
    chain = cache.insert([1, 2, 3])
    cache.insert([1, 2, 4])  # splits [1, 2, 3] into [1, 2] + [3]
    chain = cache.insert([1, 2, 3])
    cache.insert_kv(chain, lambda s, e: fake_kv([1, 2, 3][s:e]))
    pieces = cache.kv_segments(chain[-1], 3)
    assert [(part.tokens, count) for part, count in pieces] == [((1, 2), 2), ((3,), 1)]
    assert all(part.kv is not None for part, _ in pieces)
    assert [(part.tokens, count) for part, count in cache.kv_segments(chain[-1], 1)] == [((1, 2), 1)]

def test_eviction_prefers_low_value_then_least_recent():
    cache = RadixCache(budget_bytes=6 * BYTES_PER_TOKEN, bytes_per_token=BYTES_PER_TOKEN)
    shared, old, new = cache.insert([1, 2]), cache.insert([1, 2, 3, 4]), cache.insert([1, 2, 5, 6])
    for node in shared + old[1:] + new[1:]:
        assert cache.store(node, fake_kv(node.tokens))
    cache.touch(new[-1])
    shared[0].pending = 3  # the running call still needs [1, 2]
    # Storing two more tokens evicts the least recently used leaf, never the pending prefix.
    extra = cache.insert([1, 2, 7, 8])
    assert cache.store(extra[-1], fake_kv(extra[-1].tokens))
    assert old[-1].kv is None and new[-1].kv is not None and shared[0].kv is not None
    assert cache.stats.evicted_bytes == 2 * BYTES_PER_TOKEN


def test_recomputing_an_evicted_node_is_regret():
    cache = RadixCache(budget_bytes=100 * BYTES_PER_TOKEN, bytes_per_token=BYTES_PER_TOKEN)
    (node,) = cache.insert([1, 2, 3])
    cache.record_computed(node)
    cache.store(node, fake_kv(node.tokens))
    cache.evict(cache.used_bytes)
    cache.record_computed(node)
    assert cache.stats.regret_tokens == 3


def test_a_node_too_big_for_the_budget_is_not_stored():
    cache = RadixCache(budget_bytes=2 * BYTES_PER_TOKEN, bytes_per_token=BYTES_PER_TOKEN)
    (node,) = cache.insert([1, 2, 3])
    assert not cache.store(node, fake_kv(node.tokens))
    assert cache.used_bytes == 0


def test_released_requests_stop_protecting_their_prefixes():
    from aisql.engine.batch.scheduler import Scheduler

    cache = RadixCache(budget_bytes=6 * BYTES_PER_TOKEN, bytes_per_token=BYTES_PER_TOKEN)
    scheduler = Scheduler(cache, max_batch_tokens=100, max_cache_tokens=400, max_batch_size=8)
    done_group = scheduler.admit([[1, 2, 3], [1, 2, 4]])
    waiting_group = scheduler.admit([[5, 6, 7], [5, 6, 8]])
    for chain in done_group + waiting_group:
        for node in chain:
            cache.store(node, fake_kv(node.tokens))
    finished_anchor, waiting_anchor = done_group[0][0], waiting_group[0][0]
    assert finished_anchor.pending == waiting_anchor.pending == 2
    scheduler.release(done_group)
    assert finished_anchor.pending == 0 and waiting_anchor.pending == 2
    cache.touch(finished_anchor)  # even if used more recently,
    (new,) = cache.insert([9, 9])
    assert cache.store(new, fake_kv(new.tokens))
    assert finished_anchor.kv is None and waiting_anchor.kv is not None  # the finished prefix goes first


def test_a_match_may_end_inside_an_edge():
    """A prompt leaving a cached edge part-way still reuses the part it shares (as SGLang
    matches): before, the match stopped at the last whole edge."""
    cache = RadixCache(budget_bytes=100 * BYTES_PER_TOKEN, bytes_per_token=BYTES_PER_TOKEN)
    stored = [5, 6, 7, 8, 9]
    cache.insert_kv(cache.insert(stored), lambda start, end: fake_kv(stored[start:end]))
    match = cache.match_prefix([5, 6, 7, 1, 2])
    assert (match.length, match.node.tokens) == (3, (5, 6, 7, 8, 9))  # one edge, matched to its middle, not split
    assert spelled(cache.gather(match.node, match.length)) == [5, 6, 7]
    assert [count for _, count in cache.kv_segments(match.node, match.length)] == [3]
    assert cache.match_prefix([4, 5]).length == 0
    assert cache.match_prefix(stored + [1]).length == 5


def test_longest_cached_prefix_by_brute_force():
    cache = RadixCache(budget_bytes=1000 * BYTES_PER_TOKEN, bytes_per_token=BYTES_PER_TOKEN)
    stored = [[1, 2, 3, 4], [1, 2, 5, 6, 7], [8, 9]]
    for prompt in stored:
        cache.insert_kv(cache.insert(prompt), lambda start, end, p=prompt: fake_kv(p[start:end]))
    for probe in ([1, 2, 3, 9], [1, 2, 5, 6, 0], [1, 0], [8, 9, 9], [7], [1, 2, 5, 6, 7, 8]):
        longest = max(next((i for i, (a, b) in enumerate(zip(probe, s)) if a != b), min(len(probe), len(s))) for s in stored)
        match = cache.match_prefix(probe)
        assert match.length == longest, probe
        if longest:
            assert spelled(cache.gather(match.node, match.length)) == probe[:longest]


def test_reuse_counts_have_one_writer():
    """Only the cache writes a node's pending/uses counts (begin_use, end_use, record_use);
    the schedulers report through it."""
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parent.parent / "aisql"
    writers = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.AugAssign, ast.Assign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Attribute) and t.attr in ("pending", "uses") for t in targets):
                    writers.add(path.relative_to(package).as_posix())
    assert writers == {"engine/kv/radix.py"}


def test_the_eviction_policy_is_an_engine_choice(tiny_engine):
    from aisql.engine.backends.hf import HFEngine
    from aisql.engine.kv.eviction import ExpectedReuse, LeastRecentlyUsed

    assert isinstance(tiny_engine.radix.policy, ExpectedReuse)  # the default
    engine = HFEngine(tiny_engine.model, tiny_engine.tokenizer, tiny_engine.info, eviction="lru")
    assert isinstance(engine.radix.policy, LeastRecentlyUsed)


@pytest.mark.slow
def test_the_eviction_policy_reaches_the_engine_from_its_options():
    from aisql.engine import EngineOptions, load_engine
    from aisql.engine.kv.eviction import LeastRecentlyUsed

    assert isinstance(load_engine("tiny", EngineOptions(kv_eviction="lru")).radix.policy, LeastRecentlyUsed)


def test_a_full_cache_of_many_leaves_evicts_in_slices_not_per_insert():
    """evict() orders every KV leaf; called for each insert of a full cache with thousands of
    leaves it made a long stream of prompts quadratic (a 2-worker benchmark slowed ~100x)."""
    import random

    from aisql.engine.kv import radix

    cache = RadixCache(budget_bytes=40_000 * BYTES_PER_TOKEN, bytes_per_token=BYTES_PER_TOKEN)
    calls = []
    evict = cache.evict
    cache.evict = lambda need, protect=None: (calls.append(need), evict(need, protect))[1]
    rng = random.Random(0)
    inserts = 0
    for _ in range(60):
        lead = [rng.randrange(1000) for _ in range(30)]
        for _ in range(40):
            chain = cache.insert(lead + [rng.randrange(1000) for _ in range(20)])
            cache.insert_kv(chain, lambda start, end: [])
            inserts += 1
    assert len(cache._kv_leaves) > radix.BATCH_EVICTION_LEAVES and cache.stats.evicted_bytes > 0
    assert 0 < len(calls) < inserts / 50  # one eviction frees room for many inserts
    assert cache.used_bytes <= cache.budget_bytes
