"""How much of an AI node's work the result cache already holds, before anything runs.

`--max-prompts` and `aisql explain` both price only the answers still missing: a fully cached
query that reruns in a second must not be estimated at minutes, nor refused by a budget. The
share is measured on a deterministic sample of the node's distinct prompts (all of them when
there are few), rendered and looked up in the store under the model's key; nothing is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass

SAMPLE = 256  # distinct prompts looked up per node (a small node: every one of them)


@dataclass(frozen=True)
class CachedShare:
    share: float  # of the node's distinct prompts, answered in the result cache
    looked_up: int  # prompts the share was measured on
    exact: bool  # every distinct prompt of the node was looked up


def cached_share(node, stats, store, fingerprint: str, size: int = SAMPLE) -> CachedShare | None:
    """The cached share of `node`'s distinct prompts (None: its input cannot be sampled)."""
    sample = stats.sample(node, size)
    if not sample:
        return None
    texts = [node.call.template.render(values) for values, _ in sample]
    task = node.call.task
    found = store.get_many(task.store_key(fingerprint), texts, task.read)
    return CachedShare(len(found) / len(texts), len(texts), len(texts) < size)
