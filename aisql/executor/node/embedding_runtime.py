"""An AI.EMBED or AI.SIMILARITY node at run time: texts embedded once each, similarity vectorised.

Planned: `prefetch` lists the node's distinct texts — for AI.SIMILARITY the distinct values of
each side, not the pairs (DuckDB lists them from the node's input relation) — looks them up in
the result cache under the embedding model's fingerprint, and embeds the rest in sorted batches,
committing each chunk (a crash loses at most one). `lookup` then answers a vector of rows with a
gather and one row-wise product: a join over n x m pairs costs n + m embeddings and n x m
multiply-adds, never n x m model calls. Naive: each row embeds its own texts, one at a time.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import duckdb
import numpy as np

from aisql.executor.answers.answering import Answering
from aisql.executor.answers.checkpointed import Committed, ProgressLine, run_checkpointed
from aisql.executor.store.answer_store import Answer
from aisql.executor.answers.embedding_vectors import EmbeddingSource, embedding_store_key, unit_vector, vector_check
from aisql.executor.node.node_runtime import NodeRuntime
from aisql.planner.plan import ARG_PREFIX, COUNT_COLUMN

class EmbeddingRuntime(NodeRuntime):
    def __init__(self, node, embeddings: EmbeddingSource, answering: Answering) -> None:
        super().__init__(node, answering)  # its store, lock and options; the embedding model is `embeddings`
        self.embeddings = embeddings
        self.store, self.lock = answering.store, answering.lock
        self.index: dict[str, int] = {}  # text -> row of self.matrix
        self.rows: list[np.ndarray] = []  # unit vectors, float32
        self.vectors: dict[str, list[float]] = {}  # text -> the model's vector, as stored
        self.is_similarity = self.call.function.contents == 2
        self._cost: dict[str, int] = {}  # text -> its tokens (a row's logical cost)
        self._matrix: np.ndarray | None = None
        self.stats.model_kind = "embedding"
        self.closed = False  # input_limited: rows outside the LIMIT's answer NULL, unembedded

    @property
    def store_key(self) -> str:
        return embedding_store_key(self.embeddings)

    def result_type(self):
        dimension = None if self.is_similarity else self.embeddings.embedding_model().dimension
        return self.call.function.result_type(self.call.options, dimension)

    # ---- planned --------------------------------------------------------------------------
    def prefetch(self, con: duckdb.DuckDBPyConnection) -> None:
        started = time.perf_counter()
        usage = self._texts_in(con)
        self.stats.rows_in += self._rows_in
        self._ensure(usage)
        self.stats.wall_s += time.perf_counter() - started

    def prefetch_until(self, con: duckdb.DuckDBPyConnection, enough, first_chunk: int) -> None:
        """A LIMIT without ORDER BY: embedding every text is cheap next to an LLM call; done whole."""
        self.prefetch(con)

    def _texts_in(self, con: duckdb.DuckDBPyConnection) -> dict[str, int]:
        """Distinct texts of the node's input with the rows that use them, counted in DuckDB."""
        source = f"({self.node.input_sql}) AS __aisql_input"
        self._rows_in = con.sql(f"SELECT coalesce(sum({COUNT_COLUMN}), 0) FROM {source}").fetchall()[0][0]
        if self.is_similarity:
            sides = " UNION ALL ".join(
                f"SELECT {ARG_PREFIX}{i} AS v, {COUNT_COLUMN} AS n FROM {source} WHERE {ARG_PREFIX}0 IS NOT NULL AND {ARG_PREFIX}1 IS NOT NULL"
                for i in range(2)
            )
            rows = con.sql(f"SELECT v, sum(n)::BIGINT FROM ({sides}) GROUP BY v").fetchall()
            return {text: int(count) for text, count in rows}
        return dict(self.input_prompts(con).counts)  # the rendered texts, as every node lists them

    def _ensure(self, usage: dict[str, int]) -> None:
        """Vectors for every text of `usage` (text -> rows using it): the cache, then the model."""
        stats = self.stats
        stats.prompts_total += sum(usage.values())
        new = [t for t in usage if t not in self.seen_texts]
        stats.prompts_unique += len(new)
        self.seen_texts.update(new)
        wanted = [t for t in usage if t not in self.index]
        known = self.store.get_many(self.store_key, wanted, vector_check(self.embeddings)) if wanted else {}
        stats.prompts_cached += sum(1 for t in new if t in known)
        todo = sorted(t for t in wanted if t not in known)
        if todo:
            self._embed(todo, known, cached=len(wanted) - len(todo))
        for text in wanted:
            self._keep(text, known[text].value)
        for text, count in usage.items():
            cost = known[text].cost if text in known else self._cost.get(text, 0)
            stats.logical_tokens += count * cost
        for text in wanted:
            self._cost[text] = known[text].cost

    def _embed(self, todo: list[str], known: dict[str, Answer], cached: int) -> None:
        """Vectors of `todo` (sorted texts) into `known` and the store, through the run's checkpoint
        loop (aisql.executor.answers.checkpointed): time-bounded chunks, the budget asked before
        each, each committed."""
        stats, embedder = self.stats, self.embeddings.embedder()

        def embed(chunk: Sequence[str]):
            with self.lock:
                cut = embedder.texts_truncated
                vectors, lengths = embedder.embed(list(chunk))
                stats.prompts_truncated += embedder.texts_truncated - cut
            return vectors, lengths

        def commit(chunk: Sequence[str], result) -> Committed:
            vectors, lengths = result
            fresh = {t: Answer(value=v, cost=n) for t, v, n in zip(chunk, vectors, lengths)}
            self.store.put_many(self.store_key, fresh)
            known.update(fresh)
            stats.prompts_evaluated += len(fresh)
            stats.computed_tokens += sum(lengths)
            stats.forward_passes += -(-len(chunk) // 64)
            return Committed(len(fresh), sum(lengths))

        line = ProgressLine(self.options.progress, self.node.id, self.call.describe(), cached)
        run_checkpointed(todo, embed, commit, sizer=self.answering.embedding_chunks, budget=self.options.budget, line=line, weight=len)

    def _keep(self, text: str, vector: list[float]) -> None:
        if text in self.index:
            return
        self.index[text] = len(self.rows)
        self.rows.append(unit_vector(vector))
        self.vectors[text] = vector
        self._matrix = None

    def _unit_matrix(self) -> np.ndarray:
        if self._matrix is None or len(self._matrix) != len(self.rows):
            self._matrix = np.stack(self.rows) if self.rows else np.zeros((0, 1), dtype=np.float32)
        return self._matrix

    def lookup(self, columns: Sequence[list]) -> list:
        started = time.perf_counter()
        rows = list(zip(*columns))
        live = [values for values in rows if not any(v is None for v in values)]
        texts = self._texts_of(live)
        if self.closed:  # only the rows the top-N keeps were asked for; DuckDB drops the others
            asked = [all(text in self.index for text in group) for group in texts]
            live = [values for values, ok in zip(live, asked) if ok]
            texts = [group for group, ok in zip(texts, asked) if ok]
            kept = set(live)
            rows = [values if values in kept else (None,) for values in rows]  # (None,): answered NULL below
        missing: dict[str, int] = {}
        for group in texts:
            for text in group:
                if text not in self.index:
                    missing[text] = missing.get(text, 0) + 1
        if missing:
            self.stats.rows_in += len(live)
            self._ensure(missing)
        out: list[Any] = []
        answers = iter(self._values(texts))
        for values in rows:
            out.append(None if any(v is None for v in values) else next(answers))
        self.stats.wall_s += time.perf_counter() - started
        return out

    def _texts_of(self, rows: list[tuple]) -> list[tuple[str, ...]]:
        if self.is_similarity:
            return [(a, b) for a, b in rows]
        return [(self.call.template.render(values),) for values in rows]

    def _values(self, texts: list[tuple[str, ...]]) -> list:
        if not texts:
            return []
        if not self.is_similarity:
            return [self.vectors[t] for (t,) in texts]
        matrix = self._unit_matrix()
        left = matrix[[self.index[a] for a, _ in texts]]
        right = matrix[[self.index[b] for _, b in texts]]
        # unit vectors in float32: a cosine may come out a rounding step above 1 (acos -> NaN)
        return np.clip(np.einsum("ij,ij->i", left.astype(np.float64), right.astype(np.float64)), -1.0, 1.0).tolist()

    # ---- naive ----------------------------------------------------------------------------
    def naive_row(self, values: tuple) -> Any:
        """One row, its texts embedded one at a time: no dedup, no batching, no store."""
        if any(v is None for v in values):
            return None
        started = time.perf_counter()
        texts = self._texts_of([values])[0]
        embedder = self.embeddings.embedder()
        vectors = []
        for text in texts:
            with self.lock:
                cut = embedder.texts_truncated
                (vector,), (length,) = embedder.embed([text])
                self.stats.prompts_truncated += embedder.texts_truncated - cut
            vectors.append(vector)
            self.stats.prompts_total += 1
            self.stats.prompts_unique += text not in self.seen_texts
            self.seen_texts.add(text)
            self.stats.prompts_evaluated += 1
            self.stats.computed_tokens += length
            self.stats.logical_tokens += length
            self.stats.forward_passes += 1
        self.stats.rows_in += 1
        self.stats.wall_s += time.perf_counter() - started
        if not self.is_similarity:
            return vectors[0]
        a, b = (unit_vector(v).astype(np.float64) for v in vectors)
        return float(np.clip(np.dot(a, b), -1.0, 1.0))
