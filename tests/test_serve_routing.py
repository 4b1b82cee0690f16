"""The replica router of `aisql serve --replicas N` (aisql.serve.routing): pure, no Ray, no model.

A fixture per rule: a conversation's next turn goes where its prefix is; new conversations
spread; a named conversation stays put; a hot replica yields; a dead replica is never chosen and
its cache is forgotten; the baselines do what their names say."""

from __future__ import annotations

import pytest

from aisql.serve.routing import (
    BLOCK_TOKENS,
    CacheAwareRouter,
    LeastLoadRouter,
    NoReplica,
    PrefixIndex,
    ReplicaState,
    RoundRobinRouter,
    RouteRequest,
    block_hashes,
    make_router,
)


def replicas(n: int) -> list[ReplicaState]:
    return [ReplicaState(f"r{i}", alive=True) for i in range(n)]


def conversation(seed: int, tokens: int) -> list[int]:
    return [(seed * 7919 + i * 31) % 50_000 for i in range(tokens)]


def test_block_hashes_are_chained_per_whole_block_and_partitioned_by_salt():
    a = conversation(1, 5 * BLOCK_TOKENS + 3)
    b = a[: 2 * BLOCK_TOKENS] + [1] * (3 * BLOCK_TOKENS)
    assert len(block_hashes(a)) == 5  # the partial block is not hashed
    assert block_hashes(a)[:2] == block_hashes(b)[:2] and block_hashes(a)[2] != block_hashes(b)[2]
    assert block_hashes(a, salt="tenant-1")[0] != block_hashes(a, salt="tenant-2")[0]


def test_prefix_index_matches_leading_blocks_and_forgets_the_least_recent_first():
    index = PrefixIndex(capacity=4)
    first, second = block_hashes(conversation(1, 64)), block_hashes(conversation(2, 64))
    index.add(first)
    assert index.matched(first) == 4 and index.matched(second) == 0
    index.add(second[:2])
    assert len(index) == 4 and index.matched(first) == 0  # its first two blocks were the oldest
    assert index.matched(second) == 2


def test_a_conversations_next_turn_goes_where_its_prefix_is():
    state = replicas(2)
    router = CacheAwareRouter(state, capacity_blocks=[1000, 1000])
    turn1 = conversation(1, 200)
    request = RouteRequest(turn1)
    first = router.route(request)
    router.done(request)
    router.finished(first, turn1 + [5, 6, 7], None)
    state[first].load = 3  # busier, but within the imbalance
    turn2 = turn1 + [5, 6, 7] + conversation(9, 80)
    assert router.choose(RouteRequest(turn2)) == first


def test_new_conversations_spread_to_the_least_loaded():
    state = replicas(3)
    router = CacheAwareRouter(state, capacity_blocks=[1000] * 3)
    chosen = []
    for seed in range(3):
        request = RouteRequest(conversation(seed, 100))
        index = router.choose(request)
        router.sent(index, request)
        state[index].load += 1
        chosen.append(index)
    assert sorted(chosen) == [0, 1, 2]


def test_a_shared_system_prompt_does_not_pull_every_conversation_to_one_replica():
    state = replicas(2)
    router = CacheAwareRouter(state, capacity_blocks=[1000, 1000])
    system = conversation(0, 64)  # 4 blocks every conversation starts with
    first = RouteRequest(system + conversation(1, 96))
    router.sent(router.choose(first), first)
    state[0].load = 1
    second = RouteRequest(system + conversation(2, 96))  # 4 of 10 blocks cached on r0: under half
    assert router.choose(second) == 1


def test_work_queued_on_a_replica_counts_against_it_until_done():
    state = replicas(2)
    router = CacheAwareRouter(state, capacity_blocks=[1000, 1000])
    system = conversation(0, 64)
    heavy = RouteRequest(system + conversation(1, 400))
    assert router.route(heavy) == 0 and router.queued == [29, 0]
    # r0 holds the 4 system blocks, but 29 queued blocks there outweigh them
    light = RouteRequest(system + conversation(2, 32))
    assert router.choose(light) == 1
    router.done(heavy)
    state[0].load = 0
    assert router.queued == [0, 0] and router.choose(light) == 0


def test_a_named_conversation_stays_on_its_replica():
    state = replicas(2)
    router = CacheAwareRouter(state, capacity_blocks=[1000, 1000])
    request = RouteRequest(conversation(1, 40), session="agent-7")
    home = router.choose(request)
    router.sent(home, request)
    # a prompt the picture does not hold (e.g. re-rendered history) still goes home
    assert router.choose(RouteRequest(conversation(2, 40), session="agent-7")) == home


def test_a_hot_replica_yields_to_the_least_loaded():
    state = replicas(2)
    router = CacheAwareRouter(state, capacity_blocks=[1000, 1000], imbalance=2)
    prompt = RouteRequest(conversation(1, 100), session="s")  # sticky to r0, however busy r0 is...
    router.sent(0, prompt)
    state[0].load, state[1].load = 3, 0
    assert router.choose(prompt) == 1  # ...up to `imbalance` requests above the idlest
    state[0].load = 2
    assert router.choose(prompt) == 0


def test_a_dead_replica_is_never_chosen_and_its_cache_is_forgotten():
    state = replicas(2)
    router = CacheAwareRouter(state, capacity_blocks=[1000, 1000])
    prompt = RouteRequest(conversation(1, 100), session="s")
    router.sent(0, prompt)
    state[0].alive = False
    router.forget(0)
    assert router.choose(prompt) == 1
    state[0].alive = True  # the replacement starts empty: the prompt is not thought to be there
    assert router.indexes[0].matched(block_hashes(prompt.prompt_ids)) == 0
    state[1].alive = False
    state[0].alive = False
    with pytest.raises(NoReplica):
        router.choose(prompt)


def test_round_robin_skips_dead_replicas_and_least_load_picks_the_idlest():
    state = replicas(3)
    rr = RoundRobinRouter(state)
    assert [rr.choose(RouteRequest([1])) for _ in range(4)] == [0, 1, 2, 0]
    state[1].alive = False
    assert [rr.choose(RouteRequest([1])) for _ in range(3)] == [2, 0, 2]
    state[1].alive = True
    state[0].load, state[1].load, state[2].load = 2, 0, 1
    assert LeastLoadRouter(state).choose(RouteRequest([1])) == 1


def test_an_unknown_policy_is_one_clear_error():
    with pytest.raises(ValueError, match="unknown routing policy 'random'"):
        make_router("random", replicas(2), [10, 10])


def test_more_replicas_than_cores_is_one_line_before_anything_starts():
    pytest.importorskip("ray")
    import os

    from click.testing import CliRunner

    from aisql.cli import main

    too_many = 2 * (os.cpu_count() or 1) + 1
    result = CliRunner().invoke(main, ["serve", "--model", "tiny", "--port", "0", "--replicas", str(too_many), "--threads", "2"])
    assert result.exit_code != 0
    assert f"{too_many} replicas x 2 threads need {2 * too_many} CPUs" in result.output
    assert "Traceback" not in result.output
