"""Run statistics: what naive execution would have done next to what was done.

Counts are exact, not estimates: `prompts_total` and `logical_tokens` count every input row the
way row-by-row execution would send it; `computed_tokens` is what the model actually ran.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

from aisql.engine.base import EngineStats


@dataclass
class NodeStats:
    node: str
    function: str
    strategy: str
    rows_in: int = 0  # rows reaching the call, NULL arguments included
    prompts_total: int = 0  # rows with a prompt: what naive execution sends
    prompts_unique: int = 0  # distinct prompt texts among them
    prompts_cached: int = 0  # distinct prompts answered from the result cache (earlier runs, other nodes)
    prompts_evaluated: int = 0  # distinct prompts sent to the model
    prompts_late: int = 0  # prompts the final query needed that prefetch did not cover
    prompts_skipped: int = 0  # distinct prompts never asked: a LIMIT had its rows (stop_at_limit)
    prompts_sampled: int = 0  # prompts evaluated before planning to measure selectivity
    prompts_truncated: int = 0  # prompts cut to fit the context (--on-overflow truncate)
    logical_tokens: int = 0  # tokens naive execution would run through the model
    computed_tokens: int = 0  # tokens actually run through the model (padding excluded)
    kv_hit_tokens: int = 0  # prompt tokens read from the prefix KV cache
    kv_regret_tokens: int = 0  # tokens computed although computed before (evicted, or no reuse)
    kv_evicted_bytes: int = 0  # prefix-cache KV evicted to stay within --kv-budget
    padding_tokens: int = 0
    forward_passes: int = 0
    generated_tokens: int = 0
    decode_passes: int = 0
    draft_tokens: int = 0  # speculative tokens verified
    draft_accepted_tokens: int = 0
    flops: float = 0.0
    peak_kv_bytes: int = 0
    wall_s: float = 0.0
    model_kind: str = "llm"  # "embedding": answered by the embedding model (AI.EMBED, AI.SIMILARITY)
    approximate: dict | None = None  # approximate mode's report (aisql.executor.approximate.cascade.CascadeReport)
    join: dict | None = None  # an AI join in approximate mode: its strategy and why (aisql.executor.joins.join_rewrite)
    workers: dict[str, dict] = field(default_factory=dict)  # on a worker pool: per worker, shards / prompts / computed tokens / busy s
    prefix_recompute_tokens: int = 0  # prompt tokens more than one worker computed (split prefix groups)
    tie_confirmed_prompts: int = 0  # reduced-precision near ties answered in float32 (aisql.engine.model.tie_confirmation)
    tie_confirmed_tokens: int = 0
    # AI.IF's signal (distinct prompts whose P(Yes) is known): how many answered Yes, and how many
    # were near a coin toss (P(Yes) within NEAR_BOUNDARY of 0.5): an answer's confidence, summed.
    answers_scored: int = 0
    answers_yes: int = 0
    answers_near_boundary: int = 0
    # AI.IF: distinct prompts by P(Yes), in SIGNAL_BINS equal bins from 0 to 1 (how spread the
    # model's answers are: aisql.executor.report.signals reads it); AI.CLASSIFY / AI.SCORE: distinct
    # prompts per value (SCORE's values rounded to 0.1).
    p_yes_bins: list[int] = field(default_factory=list)
    log_odds_sum: float = 0.0  # of log(P(Yes) / P(No)) over the distinct prompts counted: its spread
    log_odds_squares: float = 0.0
    value_counts: dict[str, int] = field(default_factory=dict)
    labels: list[str] = field(default_factory=list)  # the labels a scored function chooses among (AI.SCORE: its scale)
    # The node's decision rule when not the likeliest label (aisql.executor.node.decisions): what made
    # it, its held-out check, its prompts; and how many distinct answers it made differ.
    decision: dict | None = None
    answers_changed: int = 0
    # AI.GENERATE and the typed generators: distinct prompts answered, the first answer (as text,
    # cut to 80 characters) and whether any other answer differed — a node whose every answer is
    # the same text says nothing about its rows (aisql.executor.report.signals warns).
    answers_generated: int = 0
    first_generated: str | None = None
    generated_differ: bool = False
    # The typed generators (AI.GENERATE_BOOL / _INT / _DOUBLE): distinct prompts per value, as
    # AI.CLASSIFY's labels are counted (numbers rounded to 0.1), so they get a quality line too.
    generated_values: dict[str, int] = field(default_factory=dict)
    # AI.CLASSIFY / AI.SCORE read on the model's own answers, whatever rule the node answers by: the
    # values under the likeliest label (or AI.SCORE's expectation) where a rule changes them, each
    # label's probability summed over the distinct prompts, and the distributions' entropy (as a
    # share of the most a distribution over the labels can have) summed — so a signal is computed
    # on what the model read, not silenced by what labelled examples changed.
    own_value_counts: dict[str, int] = field(default_factory=dict)
    label_probability_sums: list[float] = field(default_factory=list)
    label_entropy_sum: float = 0.0
    label_distributions: int = 0

    def count_signal(self, answer, own_value=None) -> None:
        """One distinct answer's signal (an AI.IF answer cached before P(Yes) was kept has none);
        `own_value`: the likeliest label's value where the node's rule is another one."""
        self._count_signals((answer.value,), (answer.p_yes,))
        self.count_reading(answer, own_value)

    def count_reading(self, answer, own_value=None) -> None:
        """What the model read in one distinct answer, beside the rule's value: its own value where
        the rule changed it, and its label distribution."""
        if own_value is not None and own_value != answer.value:
            self.answers_changed += 1
        if own_value is not None:
            key = _value_key(own_value)
            self.own_value_counts[key] = self.own_value_counts.get(key, 0) + 1
        if answer.logprobs is not None and len(answer.logprobs) > 1:
            self._count_distribution(answer.logprobs)

    def _count_distribution(self, logprobs) -> None:
        top = max(logprobs)
        weights = [math.exp(lp - top) for lp in logprobs]
        total = math.fsum(weights)
        probabilities = [w / total for w in weights]
        sums = self.label_probability_sums
        if len(sums) != len(probabilities):
            sums[:] = [0.0] * len(probabilities)
            self.label_entropy_sum, self.label_distributions = 0.0, 0
        for i, p in enumerate(probabilities):
            sums[i] += p
        self.label_entropy_sum += -math.fsum(p * math.log(p) for p in probabilities if p > 0) / math.log(len(probabilities))
        self.label_distributions += 1

    def count_signals(self, answers) -> None:
        """count_signal of each answer of a shard's columns (aisql.executor.store.answer_store.AnswerColumns)."""
        self._count_signals(answers.values, answers.p_yes)

    def count_values(self, values) -> None:
        """Distinct answers of a labelled function other than AI.IF (AI.CLASSIFY's labels, AI.SCORE's values)."""
        counts = self.value_counts
        for value in values:
            key = _value_key(value)
            counts[key] = counts.get(key, 0) + 1

    def count_generated(self, values) -> None:
        """Distinct generated answers: how many, and whether they are all one text."""
        for value in values:
            text = str(value)[:80]
            if self.first_generated is None:
                self.first_generated = text
            elif text != self.first_generated:
                self.generated_differ = True
            self.answers_generated += 1
            if value is None or isinstance(value, (bool, int, float)):  # a typed generator's literal
                key = "NULL" if value is None else str(value).lower() if isinstance(value, bool) else f"{float(value):.1f}"
                self.generated_values[key] = self.generated_values.get(key, 0) + 1

    def _count_signals(self, values, p_yes_of) -> None:
        scored = yes = near = 0
        odds = odds_squares = 0.0
        bins = self.p_yes_bins
        if not bins:
            bins.extend([0] * SIGNAL_BINS)
        for value, p_yes in zip(values, p_yes_of):
            if p_yes is not None:
                scored += 1
                yes += bool(value)
                near += abs(p_yes - 0.5) <= NEAR_BOUNDARY
                bins[min(int(p_yes * SIGNAL_BINS), SIGNAL_BINS - 1)] += 1
                p = min(max(p_yes, 1e-9), 1 - 1e-9)
                x = math.log(p / (1 - p))
                odds += x
                odds_squares += x * x
        self.answers_scored += scored
        self.answers_yes += yes
        self.answers_near_boundary += near
        self.log_odds_sum += odds
        self.log_odds_squares += odds_squares
        if not self.answers_scored:
            bins.clear()

    def add_engine(self, delta: EngineStats) -> None:
        for name in _FROM_ENGINE:
            setattr(self, name, getattr(self, name) + getattr(delta, name))
        self.peak_kv_bytes = max(self.peak_kv_bytes, delta.peak_kv_bytes)  # a level, as EngineStats adds it

    def add(self, counts) -> None:
        """What one answering call did (aisql.executor.answers.answering.AnswerCounts)."""
        for name in ANSWER_COUNTS:
            setattr(self, name, getattr(self, name) + getattr(counts, name))
        self.add_engine(counts.work)
        add_worker_counts(self.workers, counts.workers)


def _value_key(value) -> str:
    return f"{value:.1f}" if isinstance(value, float) else str(value)


NEAR_BOUNDARY = 0.1  # P(Yes) in [0.4, 0.6]: the model barely prefers one answer
SIGNAL_BINS = 20  # P(Yes) histogram bins per AI.IF node


def add_worker_counts(into: dict[str, dict], other: dict[str, dict]) -> None:
    """Per-worker counts (shards, prompts, computed tokens, busy seconds) of `other` added to `into`."""
    for worker, theirs in other.items():
        mine = into.setdefault(worker, {k: 0 for k in theirs})
        for k, v in theirs.items():
            mine[k] = round(mine[k] + v, 4) if isinstance(v, float) else mine[k] + v


# The prompt counts an answering call returns (aisql.executor.answers.answering.AnswerCounts).
ANSWER_COUNTS = ("prompts_total", "prompts_unique", "prompts_cached", "prompts_evaluated", "prompts_truncated", "logical_tokens")

_FROM_ENGINE = (
    "computed_tokens",
    "flops",
    "kv_hit_tokens",
    "kv_regret_tokens",
    "kv_evicted_bytes",
    "padding_tokens",
    "forward_passes",
    "generated_tokens",
    "decode_passes",
    "draft_tokens",
    "draft_accepted_tokens",
    "prefix_recompute_tokens",
    "tie_confirmed_prompts",
    "tie_confirmed_tokens",
)


_SUMMED = (
    "rows_in",
    "prompts_total",
    "prompts_unique",
    "prompts_cached",
    "prompts_evaluated",
    "prompts_late",
    "prompts_skipped",
    "prompts_sampled",
    "prompts_truncated",
    "logical_tokens",
) + _FROM_ENGINE


@dataclass
class RunStats:
    model: str
    model_note: str | None
    mode: str  # "planned" | "naive"
    nodes: list[NodeStats] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def is_approximate(self) -> bool:
        """Did a proxy answer any row (approximate mode, not fallen back to exact)?"""
        return any(n.approximate and not n.approximate.get("fallback_to_exact") for n in self.nodes)

    def workers(self) -> dict[str, dict]:
        """Per worker of a pool, summed over the nodes: shards, prompts, computed tokens, busy s."""
        out: dict[str, dict] = {}
        for node in self.nodes:
            for name, work in node.workers.items():
                mine = out.setdefault(name, {key: 0 for key in work})
                for key, value in work.items():
                    mine[key] = round(mine[key] + value, 4) if isinstance(value, float) else mine[key] + value
        return dict(sorted(out.items()))

    def totals(self) -> dict[str, int]:
        return {key: sum(getattr(n, key) for n in self.nodes) for key in _SUMMED}

    hardware: str | None = None  # the profile whose price the run is costed at
    price_per_hour: float | None = None
    notes: list[str] = field(default_factory=list)  # vendor arguments accepted and ignored
    embed_model: str | None = None  # the embedding model, when an AI.EMBED / AI.SIMILARITY ran
    worker_pool: list[dict] = field(default_factory=list)  # on Ray workers: each slot over the pool's life (host, device, deaths, load s)
    numerics: str | None = None  # the dtype the answers were computed in (what answered, with the model)
    threads: int | None = None  # CPU threads the engine ran with at the end of the run
    kernels: str | None = None  # a matmul kernel other than PyTorch's default, chosen by measurement

    def to_dict(self) -> dict:
        data = {"model": self.model, "model_note": self.model_note, "mode": self.mode}
        if self.numerics:
            data["numerics"] = self.numerics
        if self.threads:
            data["threads"] = self.threads
        if self.kernels:
            data["kernels"] = self.kernels
        if self.embed_model:
            data["embed_model"] = self.embed_model
        data["approximate"] = self.is_approximate
        data.update(self.totals())
        data["peak_kv_bytes"] = max((n.peak_kv_bytes for n in self.nodes), default=0)
        drafts = data["draft_tokens"]
        data["draft_acceptance"] = round(data["draft_accepted_tokens"] / drafts, 4) if drafts else None
        passes = data["decode_passes"]
        data["tokens_per_decode_pass"] = round(data["generated_tokens"] / passes, 3) if passes else None
        data["wall_s"] = round(self.wall_s, 4)
        if self.price_per_hour is not None:
            data["hardware"] = self.hardware
            data["usd"] = round(self.wall_s * self.price_per_hour / 3600, 8)
        workers = self.workers()
        if workers:
            data["workers"] = workers
        if self.worker_pool:
            data["worker_pool"] = self.worker_pool
        data["nodes"] = [{**asdict(n), "wall_s": round(n.wall_s, 4)} for n in self.nodes]
        if self.notes:
            data["notes"] = list(self.notes)
        return data

    def to_json(self) -> str:
        """The stats as strict JSON (a NaN estimate becomes null: JSON has no NaN)."""
        from aisql.json_values import json_safe

        return json.dumps(json_safe(self.to_dict())[0], indent=2, allow_nan=False)
