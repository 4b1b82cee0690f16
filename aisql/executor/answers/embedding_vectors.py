"""The embedding model's vectors of texts, through the result cache: what an embedding node
(aisql.executor.node.embedding_runtime) and the approximate mode's proxy (aisql.executor.node.node_runtime)
both read. Kept apart from the node runtimes so that neither imports the other to reach it.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from aisql.executor.store.answer_store import Answer, accepting
from aisql.executor.answers.answering import Answering
from aisql.executor.answers.checkpointed import Committed, ProgressLine, run_checkpointed

EMBEDDING_TASK = "embedding-v1"  # the store key's task part: every embedding function shares the vectors


class EmbeddingSource(Protocol):
    """Where the embedding model comes from (a ModelSession)."""

    def embedding_model(self): ...

    def embedder(self): ...


def embedding_store_key(embeddings: EmbeddingSource) -> str:
    """Where vectors live in the result cache: per embedding model, shared by every function."""
    return f"{embeddings.embedding_model().fingerprint}/{EMBEDDING_TASK}"


def vector_check(embeddings: EmbeddingSource):
    """Whether a stored value is one of this model's vectors (a cache entry that is not is
    embedded again): a list of `dimension` numbers."""
    dimension = embeddings.embedding_model().dimension

    def accepts(value) -> bool:
        return (
            isinstance(value, list)
            and len(value) == dimension
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value)
        )

    return accepting(accepts)


def unit_vector(vector: Sequence[float]) -> np.ndarray:
    """The vector scaled to length 1 in float32 (a zero vector stays zero): the one way planned
    and naive runs both normalise, so their cosines agree."""
    row = np.asarray(vector, dtype=np.float32)
    norm = np.linalg.norm(row)
    return row / norm if norm > 0 else row


def vectors_for(texts: Sequence[str], embeddings: EmbeddingSource, answering: Answering, line: ProgressLine | None = None) -> np.ndarray:
    """The embedding model's vectors of `texts` as a matrix (the result cache first, the rest
    embedded in sorted texts through the run's checkpoint loop: time-bounded chunks, the run's
    budget, each committed): for callers other than an embedding node (the approximate mode's
    proxy, a join's embedding scores). `line`: where progress goes (none: silent)."""
    key = embedding_store_key(embeddings)
    store, lock = answering.store, answering.lock
    known = {t: a.value for t, a in store.get_many(key, list(texts), vector_check(embeddings)).items()}
    todo = sorted(t for t in set(texts) if t not in known)

    def embed(chunk: Sequence[str]):
        with lock:
            return embeddings.embedder().embed(list(chunk))

    def commit(chunk: Sequence[str], result) -> Committed:
        vectors, lengths = result
        store.put_many(key, {t: Answer(value=v, cost=n) for t, v, n in zip(chunk, vectors, lengths)})
        known.update(zip(chunk, vectors))
        return Committed(len(chunk), sum(lengths))

    run_checkpointed(
        todo, embed, commit, sizer=answering.embedding_chunks, budget=answering.options.budget, line=line or ProgressLine.silent(), weight=len
    )
    return np.asarray([known[t] for t in texts], dtype=np.float32)
