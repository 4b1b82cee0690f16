"""What DuckDB counts of an AI node's AI-free input, for the planner: rows, distinct prompts per
argument prefix, leading groups, texts, and a deterministic sample of its tuples. Nothing here
runs a model; the tokenizer is read only for a groups' or texts' token sizes.
"""

from __future__ import annotations

import re
from typing import Callable

import duckdb

from aisql.engine.base import ModelFacts
from aisql.planner.inputs import ungrouped_input_sql
from aisql.planner.plan import ARG_PREFIX, COUNT_COLUMN, AINode
from aisql.planner.statistics import GroupsProfile, InputProfile, TextsProfile

TOKEN_SAMPLE = 48  # texts and prompts a token size is measured on
EXACT_DISTINCT_ROWS = 250_000  # inputs with more rows have their distinct prompts estimated (HyperLogLog): an exact count builds a hash table of every tuple in the driver (a 1M-pair join: ~0.8 GB DuckDB keeps)


class InputCounts:
    """DuckDB's counts of each node's input, each made once."""

    def __init__(self, con: duckdb.DuckDBPyConnection, facts: Callable[[], ModelFacts | None], embedding_model: Callable[[], object] | None = None) -> None:
        self.con = con
        self._facts = facts  # the model's tokenizer, when first needed
        self._embedding_model = embedding_model  # () -> EmbeddingModelRef (its tokenizer counts tokens)
        self._inputs: dict[str, InputProfile | None] = {}
        self._rows: dict[str, str] = {}  # node id -> its input row by row
        self._why_unknown: dict[str, str] = {}
        self._distinct: dict[tuple, int | None] = {}
        self._texts: dict[str, TextsProfile | None] = {}

    def why_unknown(self, node: AINode) -> str | None:
        """Why input_profile(node) is None, when it is for a reason other than AI answers."""
        return self._why_unknown.get(node.id)

    def input_profile(self, node: AINode) -> InputProfile | None:
        if node.id not in self._inputs:
            self._inputs[node.id] = self._count(node)
        return self._inputs[node.id]

    def _count(self, node: AINode) -> InputProfile | None:
        if node.estimate_sql is None:
            return None
        arity = node.call.arity
        names, not_null = _argument_columns(node)
        source = f"({self._rows_sql(node)}) AS __aisql_counted"
        try:
            # One pass: the sums and a HyperLogLog sketch of each prefix's distinct count (no
            # memory); inputs small enough are then counted exactly (a hash table of every
            # distinct tuple: for a 10^8-row cross join, GBs and minutes only to meet a budget).
            sketches = ", ".join(f"approx_count_distinct(hash({', '.join(names[:k])})) FILTER (WHERE {not_null})" for k in range(1, arity + 1))
            rows_in, total, *approximate = self.con.execute(
                f"SELECT coalesce(sum({COUNT_COLUMN}), 0), coalesce(sum({COUNT_COLUMN}) FILTER (WHERE {not_null}), 0), {sketches} FROM {source}"
            ).fetchall()[0]
            estimated = total > EXACT_DISTINCT_ROWS
            distinct: list[int] = []
            for k in range(1, arity + 1):
                if estimated:
                    distinct.append(min(int(total), max(int(approximate[k - 1] or 0), distinct[-1] if distinct else 1)))
                    continue
                columns = ", ".join(names[:k])
                distinct.append(self.con.execute(f"SELECT count(*) FROM (SELECT DISTINCT {columns} FROM {source} WHERE {not_null})").fetchall()[0][0])
        except duckdb.CatalogException as err:  # e.g. a table an earlier statement of the script creates
            first = str(err).splitlines()[0]
            missing = re.search(r"with name (\S+) does not exist", first)
            what = f"table {missing.group(1)}" if missing else "a table"
            self._why_unknown[node.id] = f"its input reads {what}, which an earlier statement of the script creates: run it to measure"
            return None
        except duckdb.InterruptException:  # Ctrl-C while DuckDB ran it: a stop, never a fallback
            raise KeyboardInterrupt from None
        except duckdb.Error as err:
            self._why_unknown[node.id] = f"its input cannot be counted without running the script ({str(err).splitlines()[0]})"
            return None
        return InputProfile(int(rows_in), int(total), tuple(int(d) for d in distinct), frozenset(self._tables(node)), distinct_estimated=estimated)

    def _rows_sql(self, node: AINode) -> str:
        """The node's input row by row (aisql.planner.inputs.ungrouped_input_sql), made once."""
        if node.id not in self._rows:
            self._rows[node.id] = ungrouped_input_sql(node.estimate_sql)
        return self._rows[node.id]

    def leading_group_sizes(self, node: AINode) -> list[int] | None:
        """Distinct prompts per value of the first argument (an AI join's anchor when it leads
        the prompt), in value order: the prefix groups a worker pool keeps whole. None when the
        input depends on AI answers."""
        profile = self.input_profile(node)
        if profile is None:
            return None
        names, not_null = _argument_columns(node)
        if profile.distinct_estimated and len(names) > 1:
            # Too many rows to hold every distinct tuple (a 10M-pair join: GBs): per leading
            # value, a HyperLogLog sketch of the rest of the tuple, over the rows as they come.
            rest = ", ".join(names[1:])
            sql = (
                f"SELECT approx_count_distinct(hash({rest})) FROM ({self._rows_sql(node)}) AS q WHERE {not_null} "
                f"GROUP BY {names[0]} ORDER BY {names[0]}"
            )
        else:
            sql = (
                f"SELECT count(*) FROM ({node.estimate_sql}) AS q WHERE {not_null} "
                f"GROUP BY {names[0]} ORDER BY {names[0]}"
            )
        try:
            return [int(row[0]) for row in self.con.execute(sql).fetchall()]
        except duckdb.InterruptException:  # Ctrl-C while DuckDB ran it: a stop, never a fallback
            raise KeyboardInterrupt from None
        except duckdb.Error:
            return None

    def groups_profile(self, node: AINode) -> GroupsProfile | None:
        """Each distinct group's characters, in tokens at the model's characters per token
        (its tokenizer on a sample of the groups' text)."""
        if self.input_profile(node) is None or self._facts() is None:
            return None
        source = f"({node.estimate_sql}) AS __aisql_counted"
        try:
            rows = self.con.execute(
                f"SELECT {ARG_PREFIX}0, json_array_length({ARG_PREFIX}0) FROM {source} WHERE {ARG_PREFIX}0 IS NOT NULL"
            ).fetchall()
        except duckdb.InterruptException:  # Ctrl-C while DuckDB ran it: a stop, never a fallback
            raise KeyboardInterrupt from None
        except duckdb.Error:
            return None
        texts = [r[0] for r in rows]
        values = [r[1] for r in rows]
        if not texts:
            return GroupsProfile(())
        sample = [t[:4000] for t in texts[:TOKEN_SAMPLE]]
        chars_per_token = sum(len(t) for t in sample) / max(1, sum(self._facts().format.count_tokens(sample)))
        numbering = self._facts().format.count_tokens(["[123] \n"])[0]  # each value is written "[i] value"
        return GroupsProfile(tuple(len(t) / chars_per_token + numbering * n for t, n in zip(texts, values)))

    def texts_profile(self, node: AINode) -> TextsProfile | None:
        if node.id not in self._texts:
            self._texts[node.id] = self._count_texts(node)
        return self._texts[node.id]

    def _count_texts(self, node: AINode) -> TextsProfile | None:
        profile = self.input_profile(node)
        if profile is None:
            return None
        source = f"({node.estimate_sql}) AS __aisql_counted"
        names, not_null = _argument_columns(node)
        if node.call.function.contents:  # each argument is a text of its own
            texts = " UNION ALL ".join(f"SELECT {n} AS v FROM {source} WHERE {not_null}" for n in names)
            total = profile.prompts_total * len(names)
        else:  # the rendered prompt is the text
            texts = f"SELECT concat({', '.join(names)}) AS v FROM {source} WHERE {not_null}"
            total = profile.prompts_total
        try:
            unique = self.con.execute(f"SELECT count(DISTINCT v) FROM ({texts})").fetchall()[0][0]
            sample = [r[0] for r in self.con.execute(f"SELECT DISTINCT v FROM ({texts}) ORDER BY hash(v) LIMIT {TOKEN_SAMPLE}").fetchall()]
        except duckdb.InterruptException:  # Ctrl-C while DuckDB ran it: a stop, never a fallback
            raise KeyboardInterrupt from None
        except duckdb.Error:
            return None
        return TextsProfile(int(total), int(unique), self._embedding_tokens(sample))

    def _embedding_tokens(self, sample: list[str]) -> float:
        """Mean tokens per text with the embedding model's own tokenizer (tokenizer.json, no
        torch); about 4 characters a token where it has none."""
        if not sample:
            return 0.0
        ref = None
        try:
            ref = self._embedding_model() if self._embedding_model else None
        except Exception:  # noqa: BLE001 - no embedding model installed: explain still estimates
            ref = None
        path = getattr(ref, "directory", None)
        if path is not None and (path / "tokenizer.json").exists():
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
            tokenizer.no_padding()
            tokenizer.no_truncation()
            return sum(len(e.ids) for e in tokenizer.encode_batch(sample)) / len(sample)
        return sum(len(t) for t in sample) / len(sample) / 4.0

    def distinct(self, node: AINode, tables: frozenset[str]) -> int | None:
        key = (node.id, tables)
        if key not in self._distinct:
            columns = [f"{ARG_PREFIX}{i}" for i, t in enumerate(node.call.argument_tables) if t and t <= tables]
            value = None
            if columns and node.estimate_sql is not None:
                try:
                    value = self.con.execute(
                        f"SELECT count(*) FROM (SELECT DISTINCT {', '.join(columns)} FROM ({node.estimate_sql}) AS q)"
                    ).fetchall()[0][0]
                except duckdb.InterruptException:  # Ctrl-C while DuckDB ran it: a stop, never a fallback
                    raise KeyboardInterrupt from None
                except duckdb.Error:
                    value = None
            self._distinct[key] = value
        return self._distinct[key]

    @staticmethod
    def _tables(node: AINode) -> set[str]:
        tables = node.call.argument_tables
        return set().union(*tables) if tables else set()

    def sample(self, node: AINode, size: int) -> list[tuple[tuple, int]] | None:
        """Up to `size` distinct non-NULL argument tuples of the node's AI-free input, with row
        counts; deterministic (ordered by a hash of the tuple)."""
        if node.estimate_sql is None:
            return None
        names, not_null = _argument_columns(node)
        columns = ", ".join(names)
        profile = self.input_profile(node)
        unique = profile.unique if profile else 0
        # The sample is the `size` tuples of smallest hash. Grouping every tuple to find them
        # holds them all (a 10^8-row cross join: GBs); keeping only hashes below a threshold
        # first keeps the same smallest ones while at least `size` pass it (else widen and retry).
        share = 8.0 * size / unique if unique > 64 * size else None
        while True:
            below = f" AND hash({columns}) < {int(share * 2**64)}::UBIGINT" if share is not None and share < 1.0 else ""
            sql = (
                f"SELECT {columns}, sum({COUNT_COLUMN}) AS __aisql_rows FROM ({self._rows_sql(node)}) AS q "
                f"WHERE {not_null}{below} GROUP BY {columns} ORDER BY hash({columns}), {columns} LIMIT {int(size)}"
            )
            try:
                rows = self.con.execute(sql).fetchall()
            except duckdb.InterruptException:  # Ctrl-C while DuckDB ran it: a stop, never a fallback
                raise KeyboardInterrupt from None
            except duckdb.Error:
                return None
            if not below or len(rows) >= size:
                return [(tuple(row[:-1]), int(row[-1])) for row in rows]
            share *= 8.0


def _argument_columns(node: AINode) -> tuple[list[str], str]:
    """The node's argument columns in its input SQL, and the condition that none is NULL (rows
    with a NULL argument never reach the model)."""
    names = [f"{ARG_PREFIX}{i}" for i in range(node.call.arity)]
    return names, " AND ".join(f"{n} IS NOT NULL" for n in names)
