"""The uncached prefixes a call's requests share, every tree level in one flat pass.

Level by level, a tree of shared prefixes (an instruction, then each group's anchor, ...) costs a
pass per level, each a few tokens and memory-bound (the weights read once for 6-22 tokens: Q4 made
six such passes, benchmarks/RESULTS.md §33). Here a level's segment reads its parent level's
segment in the same pass (aisql.engine.batch.flat's `Segment.reads`): one pass, the same KV.
"""

from __future__ import annotations

from aisql.engine.batch import flat as flat_attention
from aisql.engine.batch.flat import Segment
from aisql.engine.kv.radix import RadixNode


def shared_levels_in_one_pass(engine, nodes: list[RadixNode]) -> bool:
    """The shared nodes (parents first) as the segments of one flat pass, each reading its
    parent's segment in the pass or, for a chain's first, the deepest cached ancestor; their
    KV stored top-down. False (nothing run) where they are fewer than two levels' worth, do
    not fit one pass, or a parent is neither cached nor in the pass."""
    if not engine.flat or len(nodes) < 2 or sum(len(n.tokens) for n in nodes) > engine.scheduler.max_batch_tokens:
        return False
    index = {id(node): i for i, node in enumerate(nodes)}
    segments: list[Segment] = []
    for node in nodes:
        parent = node.parent
        if id(parent) in index:
            chain_start = segments[index[id(parent)]]
            segments.append(Segment(chain_start.prefix, chain_start.prefix_len, node.tokens, node.start, reads=index[id(parent)]))
        elif parent.is_root or parent.kv is not None:
            segments.append(Segment(parent, parent.end, node.tokens, node.start))
        else:
            return False
    if all(s.reads is None for s in segments):
        return False  # one level: the level's batches already make one pass
    engine.follow_load()
    readers = {id(s.prefix): s.prefix for s in segments}.values()
    for prefix in readers:
        engine.radix.lock(prefix)
    try:
        out = flat_attention.run_flat(engine.model, engine.runner.decoder, engine.runner.cache_kwarg, engine.radix, segments, engine.runner.pad_id)
        engine.stats.forward_passes += 1
        for b, (node, segment) in enumerate(zip(nodes, segments)):
            engine.runner.count(len(segment.tokens), segment.start)
            engine.radix.record_computed(node)
            engine.radix.insert_kv([node], lambda start, end, b=b, offset=node.start: out.kv(b, start - offset, end - offset))
    finally:
        for prefix in readers:
            engine.radix.unlock(prefix)
    return True
