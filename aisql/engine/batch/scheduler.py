"""Which tokens run in which forward pass: shared prefixes once, then one row per request.

For a list of requests the scheduler puts every prompt into the radix tree (as structure) and
counts how many of the call's requests pass through each node. Nodes shared by two or more
requests and not cached yet are computed first, top-down, each from its deepest cached ancestor,
and stored. Then each request runs only the tokens after its deepest cached ancestor. Rows are
grouped into batches under a token budget, keeping the callers' order (prefix order, from the
planner), so rows of one batch mostly share their prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

from aisql.engine.batch.model_runner import Row
from aisql.engine.kv.radix import RadixCache, RadixNode


@dataclass
class Work:
    row: Row
    nodes: list[RadixNode]  # nodes whose tokens the row computes in full, in path order
    index: int = -1  # request index, for leaf work
    prompt: Sequence[int] = ()  # leaf work: the request's prompt
    chain: list[RadixNode] | None = None  # leaf work: its path; shared work: None
    reuse: bool = True


PAD_SLACK_TOKENS = 512  # padding a batch may carry before a new batch pays off (a pass costs about this)


class Scheduler:
    def __init__(self, radix: RadixCache, max_batch_tokens: int, max_cache_tokens: int, max_batch_size: int) -> None:
        self.radix = radix
        self.max_batch_tokens = max_batch_tokens
        self.max_cache_tokens = max_cache_tokens
        self.max_batch_size = max_batch_size

    def admit(self, prompts: Sequence[Sequence[int]], salts: Sequence[str | None] | None = None) -> list[list[RadixNode]]:
        """Put the prompts into the tree (under their salts' roots) and count them on their paths."""
        salts = salts or [None] * len(prompts)
        # Insert everything first: a later prompt may split a node on an earlier prompt's path,
        # so chains are read only once the tree has all branch points (this pass creates nothing).
        for prompt, salt in zip(prompts, salts):
            self.radix.insert(prompt, salt)
        chains = [self.radix.insert(p, salt) for p, salt in zip(prompts, salts)]
        for chain in chains:
            self.radix.begin_use(chain)
        return chains

    def release(self, chains: Sequence[list[RadixNode]]) -> None:
        """Requests done: they no longer count towards their nodes' expected reuse, so a finished
        group's prefix becomes evictable as soon as its last request has run."""
        for chain in chains:
            self.radix.end_use(chain)

    def shared_levels(self, chains: Sequence[list[RadixNode]]) -> Iterator[list[Work]]:
        """Rows computing the shared, uncached nodes, one tree level at a time (parents first).

        Generated lazily: a level's rows start from whatever the previous levels managed to store.
        """
        by_depth: dict[int, dict[int, RadixNode]] = {}
        for chain in chains:
            for depth, node in enumerate(chain):
                if node.pending >= 2 and node.kv is None:
                    by_depth.setdefault(depth, {})[id(node)] = node
        for depth in sorted(by_depth):
            works = []
            for node in by_depth[depth].values():
                if node.kv is not None:
                    continue
                works.append(self._shared_work(node))
            if works:
                yield works

    def shared_nodes(self, chains: Sequence[list[RadixNode]]) -> list[RadixNode]:
        """The uncached nodes two or more of the call's requests pass through, parents first."""
        found: dict[int, tuple[int, RadixNode]] = {}
        for chain in chains:
            for depth, node in enumerate(chain):
                if node.pending >= 2 and node.kv is None:
                    found.setdefault(id(node), (depth, node))
        return [node for _, node in sorted(found.values(), key=lambda entry: entry[0])]

    def leaf_work(self, index: int, prompt: Sequence[int], chain: list[RadixNode], reuse: bool) -> Work:
        """The row of one request: the tokens after its deepest cached ancestor (at least one,
        since the last position's hidden state is what scoring and decoding need)."""
        cached = self.radix.deepest_cached(chain) if reuse else self.radix.root
        prefix_len = min(cached.end, len(prompt) - 1)
        covered = [n for n in chain if n.start >= prefix_len]
        return Work(Row(cached, prefix_len, list(prompt[prefix_len:])), covered, index, prompt, chain, reuse)

    def windows(self, works: list[Work], window_batches: int = 4) -> list[list[Work]]:
        """Consecutive windows of a few batches' worth of requests, in the callers' prefix order:
        the shared prefixes one window reads are few, computed together and in the cache
        together. Inside a window, each group of requests reading the same shared prefix stays
        together, shortest tails first (batches then pad less)."""
        size = max(1, window_batches * self.max_batch_size)
        windows = []
        for start in range(0, len(works), size):
            window = works[start : start + size]
            order = {}
            for work in window:
                order.setdefault(self.group_of(work), len(order))
            windows.append(sorted(window, key=lambda w: (order[self.group_of(w)], len(w.prompt))))
        return windows

    @staticmethod
    def group_of(work: Work) -> int | None:
        """The deepest node of a request's path shared with other requests of the call."""
        shared = [n for n in (work.chain or []) if n.pending >= 2]
        return id(shared[-1]) if shared else None

    def refresh(self, work: Work) -> Work | None:
        """The same work planned against the tree as it is now (an earlier batch may have evicted
        its prefix or cached more of it); None if there is nothing left to compute."""
        if work.chain is not None:
            return self.leaf_work(work.index, work.prompt, work.chain, work.reuse)
        target = work.nodes[-1]
        return None if target.kv is not None else self._shared_work(target)

    def _shared_work(self, node: RadixNode) -> Work:
        """Compute `node` (and any uncached ancestors) from its deepest cached ancestor."""
        cached = self.radix.deepest_cached(node.path()[:-1])
        covered = node.path()[len(cached.path()) :]
        tokens = [t for n in covered for t in n.tokens]
        return Work(Row(cached, cached.end, tokens), covered)

    def batches(self, works: Sequence[Work], extra_tokens: Sequence[int] | None = None) -> Iterator[list[Work]]:
        """Consecutive works whose padded batch fits the budgets (`extra_tokens`: decode room per
        work), cut early where padding to a longer row would waste more than a pass is worth."""
        batch: list[Work] = []
        prefix_width = span = extra = real = 0
        group = None
        for position, work in enumerate(works):
            more = extra_tokens[position] if extra_tokens is not None else 0
            length = len(work.row.tokens)
            new_prefix = max(prefix_width, work.row.prefix_len)
            new_span = max(span, length)
            new_extra = max(extra, more)
            size = len(batch) + 1
            waste = size * new_span - (real + length)
            this_group = self.group_of(work)
            over = batch and (
                size > self.max_batch_size
                or size * new_span > self.max_batch_tokens
                or size * (new_prefix + new_span + new_extra) > self.max_cache_tokens
                or waste > max(PAD_SLACK_TOKENS, (real + length) // 4)
                # A batch reading one prefix needs no per-row copies of it: end a half-full batch
                # batch where the next group begins.
                or (this_group != group and len(batch) >= self.max_batch_size // 2)
            )
            group = this_group
            if over:
                yield batch
                batch, new_prefix, new_span, new_extra, real = [], work.row.prefix_len, length, more, 0
            batch.append(work)
            prefix_width, span, extra = new_prefix, new_span, new_extra
            real += length
        if batch:
            yield batch
