"""The planner's statistics at run and explain time: DuckDB counts, the model's tokenizer, samples.

Counts come from each node's estimate query (its input with no AI answer known). Token counts come
from the model's own tokenizer on a deterministic sample of the node's prompts. Selectivity comes
from the node's hint, else — when a sampler is given — from running the predicate on a sample of
its input (the answers go to the answer store, so the run reuses them), else a default.
"""

from __future__ import annotations

import re
import time
from contextlib import contextmanager
from typing import Callable

import duckdb

from aisql.engine.model.prompt_format import encode_labels
from aisql.engine.base import ModelFacts
from aisql.executor.answers.request_kinds import kind_of
from aisql.planner.inputs import ungrouped_input_sql
from aisql.planner.plan import ARG_PREFIX, COUNT_COLUMN, AINode
from aisql.planner.statistics import DEFAULT_SELECTIVITY, GroupsProfile, InputProfile, Selectivity, TextsProfile, TokenProfile

TOKEN_SAMPLE = 48
EXACT_SECONDS = 1.0  # explain tokenizes a node's every distinct prompt when that takes about this long or less
EXACT_DISTINCT_ROWS = 250_000  # inputs with more rows have their distinct prompts estimated (HyperLogLog): an exact count builds a hash table of every tuple in the driver (a 1M-pair join: ~0.8 GB DuckDB keeps)
TIMING_PROMPTS = 64  # prompts tokenized to measure how long the rest would take
SELECTIVITY_SAMPLE = 32

# (node, sampled argument tuples) -> the node's SQL value per tuple, or None if it may not sample
Sampler = Callable[[AINode, list[tuple]], list | None]


class MeasuredStatistics:
    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        facts: Callable[[], ModelFacts] | None,
        sampler: Sampler | None = None,
        sample_size: int = SELECTIVITY_SAMPLE,
        min_sampling_ratio: float = 4.0,
        embedding_model: Callable[[], object] | None = None,
    ) -> None:
        """`facts` gives the model's tokenizer and shape when first needed (None: counts only)."""
        self.con = con
        self._facts_provider = facts
        self._facts: ModelFacts | None = None
        self.sampler = sampler
        self.sample_size = sample_size
        # Sample only inputs at least this many times the sample: a sample is then at most a
        # 1/ratio share of the predicate's own work (smaller inputs keep the default order).
        self.min_sampling_ratio = min_sampling_ratio
        self._inputs: dict[str, InputProfile | None] = {}
        self._rows: dict[str, str] = {}  # node id -> its input row by row
        self._why_unknown: dict[str, str] = {}
        self._tokens: dict[str, TokenProfile | None] = {}
        self._sequences: dict[str, list[tuple[int, ...]] | None] = {}
        self._selectivity: dict[str, Selectivity] = {}
        self._distinct: dict[tuple, int | None] = {}
        self._embedding_model = embedding_model  # () -> EmbeddingModelRef (its tokenizer counts tokens)
        self._texts: dict[str, TextsProfile | None] = {}

    @property
    def facts(self) -> ModelFacts | None:
        if self._facts is None and self._facts_provider is not None:
            self._facts = self._facts_provider()
        return self._facts

    @property
    def model(self):
        return self.facts.profile if self.facts else None

    # ---- counts -----------------------------------------------------------------------------
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
        if self.input_profile(node) is None or self.facts is None:
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
        chars_per_token = sum(len(t) for t in sample) / max(1, sum(self.facts.format.count_tokens(sample)))
        numbering = self.facts.format.count_tokens(["[123] \n"])[0]  # each value is written "[i] value"
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

    # ---- tokens -----------------------------------------------------------------------------
    def token_profile(self, node: AINode) -> TokenProfile | None:
        if node.id not in self._tokens:
            self._tokens[node.id] = self._measure_tokens(node)
        return self._tokens[node.id]

    def _measure_tokens(self, node: AINode) -> TokenProfile | None:
        sample = self.sample(node, TOKEN_SAMPLE)
        if sample is None or self.facts is None:
            return None
        fmt = self.facts.format
        task = node.call.task
        before, after = fmt.frame(task.framing)
        template = node.call.template
        shared = fmt.count_tokens([before + template.parts[0]])[0]
        arity = node.call.arity
        segments = [0.0] * arity
        tails = []
        texts_per_row = []
        for values, _ in sample or []:
            prefixes = []
            text = template.parts[0]
            for slot, part in zip(template.slots, template.parts[1:]):
                text += values[slot] + part
                prefixes.append(text)
            texts_per_row.append([before + p for p in prefixes] + [before + text + after])
        # one tokenizer call for the whole sample (a call per row cost ~10% of a small query's time)
        every = fmt.count_tokens([text for texts in texts_per_row for text in texts]) if texts_per_row else []
        starts = [0]
        for texts in texts_per_row:
            starts.append(starts[-1] + len(texts))
        for row in range(len(texts_per_row)):
            counts = every[starts[row] : starts[row + 1]]
            previous, deepest = shared, -1
            # Arguments are numbered in order of first appearance: a gap belongs to the segment of
            # the deepest argument seen so far (a value used again adds to that segment).
            for slot, count in zip(template.slots, counts[:-1]):
                deepest = max(deepest, slot)
                segments[deepest] += count - previous
                previous = count
            tails.append(counts[-1] - previous)
        n = max(1, len(sample or []))
        label_tails = sum(len(label) - 1 for label in encode_labels(self.facts.encode_label, fmt.end_of_answer, task.labels, task.framing))
        output = node.call.function.output_tokens(node.call.options)
        first_literal = float(fmt.count_tokens([template.parts[1]])[0]) if len(template.parts) > 1 and template.parts[1] else 0.0
        leading = self._leading_growth(fmt, before, template, sample, shared)
        return TokenProfile(
            shared=float(shared),
            segments=tuple(s / n for s in segments),
            first_literal=first_literal,
            leading_sampled=leading[0],
            leading_tree=leading[1],
            leading_marginal=leading[2],
            tail=sum(tails) / n if tails else float(fmt.count_tokens([before + after])[0] - shared),
            label_tails=label_tails,
            output_tokens=output,
            sampled=len(sample or []),
        )

    def token_sequences(self, node: AINode) -> list[tuple[tuple[int, ...], list[tuple[int, ...]]]] | None:
        """Every distinct prompt of the node's AI-free input as the sequences the engine runs:
        (prompt, the label tails scored after it — [()] when nothing is scored), when tokenizing them all takes
        about EXACT_SECONDS or less — measured on the first TIMING_PROMPTS with this model's
        tokenizer, on this machine; else None (the cost model then estimates from a sample).
        DuckDB counts the distinct prompts first: nothing is rendered for a node too big."""
        if node.id not in self._sequences:
            self._sequences[node.id] = self._exact_sequences(node)
        return self._sequences[node.id]

    def _exact_sequences(self, node: AINode) -> list[tuple[int, ...]] | None:
        profile = self.input_profile(node)
        if profile is None or self.facts is None or not profile.unique or self.token_profile(node) is None:
            return None
        head = self.sample(node, min(int(profile.unique), TIMING_PROMPTS))
        if not head:
            return None
        task = node.call.task
        fmt = self.facts.format
        started = time.perf_counter()
        ids = fmt.encode_prompts(task.framing, [node.call.template.render(values) for values, _ in head])
        per_prompt = (time.perf_counter() - started) / len(head)
        if profile.unique * per_prompt > EXACT_SECONDS:
            return None
        if profile.unique > len(head):
            rows = self.sample(node, int(profile.unique))  # the same order: its first rows are `head`
            if rows is None:
                return None
            rest = rows[len(head) :]
            ids = ids + fmt.encode_prompts(task.framing, [node.call.template.render(values) for values, _ in rest])
        tails = [label[:-1] for label in encode_labels(self.facts.encode_label, fmt.end_of_answer, task.labels, task.framing)] if kind_of(task).labels else []
        tails = list(dict.fromkeys(tails)) or [()]
        return [(tuple(prompt), tails) for prompt in ids]

    @staticmethod
    def _leading_growth(fmt, before: str, template, sample, shared: int) -> tuple[int, float, float]:
        """Prefix-tree size of the first segment over the sample's distinct first values, and how
        much it grew per value over the second half (the cost of one more value, extrapolated)."""
        first_slot = template.slots[0] if template.slots else None
        if first_slot is None:
            return 0, 0.0, 0.0
        after_first = template.parts[1] if len(template.parts) > 1 else ""
        values = list(dict.fromkeys(values[first_slot] for values, _ in sample))
        if len(values) < 4:
            return 0, 0.0, 0.0
        ids = fmt.tokenizer([before + template.parts[0] + v + after_first for v in values], add_special_tokens=False)["input_ids"]
        nodes: set[tuple[int, ...]] = set()
        half_size = 0.0
        for i, seq in enumerate(ids):
            nodes.update(tuple(seq[:j]) for j in range(shared + 1, len(seq) + 1))
            if i + 1 == len(values) // 2:
                half_size = float(len(nodes))
        full = float(len(nodes))
        marginal = (full - half_size) / (len(values) - len(values) // 2)
        return len(values), full, marginal

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

    # ---- selectivity --------------------------------------------------------------------------
    @contextmanager
    def sampling_paused(self):
        """Plan without running the model (defaults for unhinted selectivities), e.g. to check a
        budget before any model work; what was assumed meanwhile is forgotten afterwards."""
        sampler, known = self.sampler, set(self._selectivity)
        self.sampler = None
        try:
            yield self
        finally:
            self.sampler = sampler
            for node_id in set(self._selectivity) - known:
                del self._selectivity[node_id]

    def selectivity(self, node: AINode) -> Selectivity:
        if node.id not in self._selectivity:
            self._selectivity[node.id] = self._selectivity_of(node)
        return self._selectivity[node.id]

    def _selectivity_of(self, node: AINode) -> Selectivity:
        hint = node.call.hints.get("selectivity")
        if hint is not None:
            return Selectivity(float(hint), "hint")
        profile = self.input_profile(node)
        large_enough = profile is not None and profile.unique >= self.min_sampling_ratio * self.sample_size
        if self.sampler is not None and node.call.function.is_predicate and large_enough:
            sample = self.sample(node, self.sample_size)
            if sample:
                answers = self.sampler(node, [values for values, _ in sample])
                if answers is None:
                    return Selectivity(DEFAULT_SELECTIVITY, "default")
                rows = sum(count for _, count in sample)
                true_rows = sum(count for (_, count), answer in zip(sample, answers) if answer)
                return Selectivity(true_rows / rows if rows else DEFAULT_SELECTIVITY, "sample", len(sample))
        return Selectivity(DEFAULT_SELECTIVITY, "default")


def _argument_columns(node: AINode) -> tuple[list[str], str]:
    """The node's argument columns in its input SQL, and the condition that none is NULL (rows
    with a NULL argument never reach the model)."""
    names = [f"{ARG_PREFIX}{i}" for i in range(node.call.arity)]
    return names, " AND ".join(f"{n} IS NOT NULL" for n in names)
