"""The prefix tree explain counts exact tokens with (aisql.planner.prefix_tree): a prompt and its
labels' tails inserted as branches count exactly what the full sequences count — the prompt
walked once instead of once per label (issue 58, cause 13: 10,000 labels took explain 225 s)."""

from __future__ import annotations

import random

from aisql.planner.prefix_tree import PrefixTrie


def test_branches_count_what_the_full_sequences_count():
    rng = random.Random(7)
    for _ in range(50):
        prompts = [tuple(rng.randrange(6) for _ in range(rng.randrange(1, 12))) for _ in range(rng.randrange(1, 6))]
        tails = [tuple(rng.randrange(6) for _ in range(rng.randrange(0, 4))) for _ in range(rng.randrange(1, 5))]
        flat, branched = PrefixTrie(), PrefixTrie()
        expected = flat.insert_all(p + t for p in prompts for t in tails)
        assert sum(branched.insert_branches(p, tails) for p in prompts) == expected
        assert branched.size == flat.size


def test_a_prefix_computed_earlier_is_not_counted_again():
    trie = PrefixTrie()
    assert trie.insert_branches((1, 2, 3), [(4,), (5, 6)]) == 3 + 1 + 2
    assert trie.insert_branches((1, 2), [(3, 4), (9,)]) == 1  # only (1, 2, 9) is new
