"""The cost model: prompts, tokens, FLOPs, time and money per AI node, planned and naive.

Tokens follow the prefix tree the engine computes. A prompt is: a shared part (instruction, chat
framing, the template's static prefix), then one segment per argument (its value and the literal
text after it), then a tail (e.g. the assistant header). With prefix reuse the shared part is
computed once, segment k once per distinct (a0..ak), and the tail once per distinct prompt; naive
execution computes every prompt of every row in full.

An AI predicate that runs earlier shrinks a node's input: by its selectivity if it reads a subset
of the node's tables, or — through a join — by the chance that a tuple keeps at least one partner.
Predicates are assumed independent.

Time is a roofline: a pass costs at least its FLOPs at the hardware's reachable throughput and at
least one read of the weights. It is a lower bound (no Python or kernel-launch overheads).
"""

from __future__ import annotations

import math
from typing import Callable
from dataclasses import asdict, astuple, dataclass, field

from aisql.functions import Request
from aisql.planner.hardware import Hardware
from aisql.planner.plan import AINode, NodeRole, Plan, Strategy
from aisql.planner.prefix_tree import PrefixTrie
from aisql.planner.reduction import packing_capacity, reduction_plan
from aisql.planner.statistics import InputProfile, ModelProfile, Selectivity, Statistics, TokenProfile

BATCH_TOKENS = 16384  # tokens per planned forward pass (the engine's default budget on CPU)
DECODE_BATCH = 64


@dataclass(frozen=True)
class Side:
    """One execution's cost for a node: planned or naive."""

    prompts: float  # prompts sent to the model
    tokens: float  # tokens run through the model (prefill + decode)
    flops: float
    time_s: float
    usd: float
    passes: float = 0.0  # forward passes the engine makes for it (LLM prompts; 0 where not modelled)

    def __add__(self, other: "Side") -> "Side":
        return Side(*(a + b for a, b in zip(astuple(self), astuple(other))))


ZERO = Side(0, 0, 0, 0, 0)


@dataclass(frozen=True)
class NodeEstimate:
    node: str
    quality: str  # "estimate" | "unknown"
    reason: str = ""
    rows_in: float | None = None
    prompts_total: float | None = None
    prompts_unique: float | None = None
    input_factor: float = 1.0  # share of its AI-free input that reaches the node
    selectivity: Selectivity | None = None
    tokens_per_prompt: float | None = None
    computed_without_prefix_cache: float | None = None  # dedup only, every prompt in full
    plan: Side = ZERO
    naive: Side = ZERO
    # Share of the node's distinct prompts already in the result cache (given by the executor,
    # which owns the cache; `plan` then prices only the rest). None: not looked up.
    cached_share: float | None = None
    cached_share_exact: bool = False  # every distinct prompt was looked up, not a sample

    def to_dict(self) -> dict:
        data = asdict(self)
        data["plan"], data["naive"] = asdict(self.plan), asdict(self.naive)
        return data


@dataclass
class PlanEstimate:
    hardware: Hardware
    model: ModelProfile | None
    nodes: list[NodeEstimate] = field(default_factory=list)

    @property
    def plan(self) -> Side:
        return sum((n.plan for n in self.nodes), ZERO)

    @property
    def naive(self) -> Side:
        return sum((n.naive for n in self.nodes), ZERO)

    def node(self, node_id: str) -> NodeEstimate | None:
        return next((n for n in self.nodes if n.node == node_id), None)


# ---- pieces shared with the ordering rule ------------------------------------------------------


def filters_rows(node: AINode) -> bool:
    """Does the node drop rows through its TRUE/FALSE answer (an AI.IF in WHERE or ON)?"""
    return node.call.function.is_predicate and node.role in (NodeRole.FILTER, NodeRole.JOIN)


def reduction(q: AINode, p: AINode, stats: Statistics) -> float:
    """Factor by which running predicate `q` first shrinks `p`'s distinct input."""
    if not filters_rows(q):
        return 1.0
    q_input, p_input = stats.input_profile(q), stats.input_profile(p)
    s = stats.selectivity(q).value
    if q_input is None or p_input is None:
        return s
    if not q_input.tables or q_input.tables <= p_input.tables:
        return s
    shared = q_input.tables & p_input.tables
    if not shared:
        return 1.0
    groups = stats.distinct(q, frozenset(shared))
    if not groups:
        return s
    partners = max(1.0, q_input.unique / groups)
    return 1.0 - (1.0 - s) ** partners


def leading_key(node: AINode) -> tuple:
    """Nodes with equal keys share their prompts' beginning up to the first argument's value:
    same task (so the same instruction), same static prefix, same first argument."""
    call = node.call
    return (call.task, call.template.static_prefix, call.args[0].sql() if call.args else "")


def computed_tokens(
    tokens: TokenProfile, prefix_distinct: tuple[float, ...], shared_paid: bool, leading_cached: float = 0.0
) -> float:
    """Tokens the engine computes for a node's distinct prompts with prefix reuse.

    `leading_cached`: first-argument values an earlier node with the same leading key already
    ran: their tokens are in the cache, only the literal text after them is new."""
    unique = prefix_distinct[-1] if prefix_distinct else 0.0
    total = 0.0 if shared_paid else tokens.shared
    for k, (d, seg) in enumerate(zip(prefix_distinct, tokens.segments)):
        if k == 0:
            reused = min(d, leading_cached)
            new = d - reused
            # New first values share their common openings (measured); reused ones only add the
            # literal after them.
            total += (tokens.leading_tokens(new) if new > 0 else 0.0) + reused * tokens.first_literal
        else:
            total += d * seg
    total += unique * (tokens.tail + tokens.label_tails)
    return total + decode_tokens(tokens, unique)


def decode_tokens(tokens: TokenProfile, prompts: float) -> float:
    return prompts * max(0.0, tokens.output_tokens - 1)


def shrink(profile: InputProfile, factor: float) -> tuple[float, ...]:
    """Distinct prefixes after keeping a `factor` share of the distinct tuples: a group of
    prefix k survives if any of its tuples does."""
    unique = profile.unique
    out = []
    for d in profile.prefix_distinct:
        if d <= 0 or unique <= 0:
            out.append(0.0)
            continue
        members = unique / d
        out.append(d * (1.0 - (1.0 - factor) ** members) if factor < 1.0 else float(d))
    if out:
        out[-1] = unique * factor
    return tuple(out)


# ---- the estimate of a plan ----------------------------------------------------------------------


def estimate_plan(plan: Plan, stats: Statistics, hardware: Hardware) -> PlanEstimate:
    estimate = PlanEstimate(hardware=hardware, model=stats.model)
    cached_leading: dict[tuple, float] = {}  # leading key -> first-argument values in the cache
    counted = PrefixTrie()  # the exactly counted nodes' sequences: what a fresh engine's cache holds after them
    for position, node in enumerate(plan.nodes):
        estimate.nodes.append(_estimate_node(plan, position, node, stats, hardware, cached_leading, counted))
    return estimate


# all-MiniLM-L6-v2 (the default embedding model): parameters a token runs through (6 layers of
# 4*384^2 attention + 2*384*1536 MLP weights; the embedding table is a lookup).
EMBED_PARAMETERS = 10.6e6


def _estimate_embedding(node: AINode, stats: Statistics, hardware: Hardware) -> NodeEstimate:
    """An embedding node embeds each distinct text once (naive: every row's texts, one by one)."""
    texts = stats.texts_profile(node)
    if texts is None:
        why = getattr(stats, "why_unknown", lambda _: None)(node)
        return NodeEstimate(node.id, "unknown", why or node.note or "its input depends on other AI answers")
    profile = stats.input_profile(node)

    def side(count: float) -> Side:
        tokens = count * texts.tokens_per_text
        flops = 2.0 * EMBED_PARAMETERS * tokens
        time_s = flops / (hardware.peak_flops * hardware.efficiency)  # a lower bound, like the LLM's roofline
        return Side(count, tokens, flops, time_s, time_s * hardware.price_per_hour / 3600)

    return NodeEstimate(
        node=node.id,
        quality="estimate",
        reason=f"embedding model: {texts.unique:,} distinct texts embedded once each"
        + (f"; the similarity of {profile.prompts_total:,} pairs is a vectorised product" if node.call.function.contents else ""),
        rows_in=profile.rows_in if profile else None,
        prompts_total=texts.total,
        prompts_unique=texts.unique,
        tokens_per_prompt=texts.tokens_per_text,
        computed_without_prefix_cache=texts.unique * texts.tokens_per_text,
        plan=side(texts.unique),
        naive=side(texts.total),
    )


ASSUMED_CONTEXT = 4096  # a model profile cached without its context length
AGGREGATE_OVERHEAD = 80  # tokens of an aggregate prompt's framing and task (measured: 50-80)


def _estimate_aggregate(node: AINode, stats: Statistics, hardware: Hardware) -> NodeEstimate:
    """An AI aggregate's map and reduce prompts, from its groups' sizes (aisql.executor.answers.aggregate)."""
    groups = stats.groups_profile(node)
    profile = stats.input_profile(node)
    if groups is None or profile is None:
        why = getattr(stats, "why_unknown", lambda _: None)(node)
        return NodeEstimate(node.id, "unknown", why or node.note or "its groups depend on other AI answers")
    model = stats.model
    max_tokens = int(node.call.task.max_tokens or 1)
    context = (model.max_context if model and model.max_context else ASSUMED_CONTEXT)
    capacity = packing_capacity(context, AGGREGATE_OVERHEAD, max_tokens)
    maps, reduces, depth = reduction_plan(groups.tokens, capacity, max_tokens)
    prompts = maps + reduces
    prefill = sum(groups.tokens) + prompts * AGGREGATE_OVERHEAD + reduces * 2 * max_tokens
    tokens = prefill + prompts * max_tokens
    flops = 2.0 * model.params * tokens if model else 0.0
    time_s = flops / (hardware.peak_flops * hardware.efficiency) if model else 0.0
    if hardware.planned_tokens_per_s:
        time_s = tokens / hardware.planned_tokens_per_s
    side = Side(prompts, tokens, flops, time_s, time_s * hardware.price_per_hour / 3600)
    repeat = profile.prompts_total / max(1, profile.unique)  # naive reduces every group row, repeats too
    naive = Side(*(x * repeat for x in astuple(side)))
    return NodeEstimate(
        node=node.id,
        quality="estimate",
        reason=f"{len(groups.tokens):,} groups of ~{sum(groups.tokens) / max(1, len(groups.tokens)):,.0f} tokens: "
        f"map {maps:,} prompts, reduce {reduces:,} prompts, depth {depth}",
        rows_in=profile.rows_in,
        prompts_total=profile.prompts_total,
        prompts_unique=profile.unique,
        tokens_per_prompt=tokens / max(1, prompts),
        computed_without_prefix_cache=tokens,
        plan=side,
        naive=naive,
    )


def _estimate_node(plan, position, node, stats, hardware, cached_leading, counted) -> NodeEstimate:
    estimator = ESTIMATORS.get(node.call.function.request)
    if estimator is not None:
        return estimator(node, stats, hardware)
    return _estimate_prompts(plan, position, node, stats, hardware, cached_leading, counted)


def _estimate_prompts(plan, position, node, stats, hardware, cached_leading, counted: PrefixTrie) -> NodeEstimate:
    """A node of LLM prompts (SCORE or GENERATE): the prefix-tree segment model, earlier nodes'
    reductions, a LIMIT's early stop, leading parts another node already computed. Where every
    prompt of the node is known (no earlier AI answer filters its input, no LIMIT stops it) and
    few enough to tokenize in about a second, their prefix tree is counted exactly instead."""
    profile = stats.input_profile(node)
    tokens = stats.token_profile(node)
    if profile is None:
        if node.strategy is Strategy.STREAMING and node.note:
            return NodeEstimate(node.id, "unknown", node.note)
        why = getattr(stats, "why_unknown", lambda _: None)(node)
        return NodeEstimate(node.id, "unknown", why or "its input depends on other AI answers")
    if tokens is None:
        return NodeEstimate(node.id, "unknown", "no tokenizer to count tokens with")
    earlier = [q for q in plan.nodes[:position] if q.id in node.depends_on]
    factor = 1.0
    for q in earlier:
        factor *= reduction(q, node, stats)
    key = leading_key(node)
    shared_paid = key in cached_leading
    distinct = shrink(profile, factor)
    if node.stop_after is not None and distinct and distinct[-1] > 0:
        # LIMIT k with nothing ordering the rows: about k / selectivity prompts are asked, and
        # never fewer than the first chunk the executor asks before it first checks.
        selectivity = max(stats.selectivity(node).value, 1e-3)
        asked = min(distinct[-1], max(node.first_chunk, node.stop_after / selectivity)) if node.stop_after else 0.0
        distinct = [min(d, asked) for d in distinct]
    leading = cached_leading.get(key, 0.0)
    cached_leading[key] = max(leading, distinct[0] if distinct else 0.0)
    unique = distinct[-1] if distinct else 0.0
    total = profile.prompts_total * factor
    per_prompt = tokens.prompt_tokens + tokens.label_tails
    planned_tokens = computed_tokens(tokens, distinct, shared_paid, leading)
    sequences = getattr(stats, "token_sequences", lambda _: None)(node) if factor == 1.0 and node.stop_after is None else None
    exact = sequences is not None
    if exact:
        planned_tokens = sum(counted.insert_branches(prompt, tails) for prompt, tails in sequences) + decode_tokens(tokens, unique)
    naive_tokens = total * per_prompt + decode_tokens(tokens, total)
    model = stats.model
    plan_side = _side(unique, planned_tokens, _plan_flops(tokens, distinct, unique, shared_paid, model), hardware, model, tokens, batched=True)
    naive_side = _side(total, naive_tokens, _naive_flops(tokens, total, model), hardware, model, tokens, batched=False)
    return NodeEstimate(
        node=node.id,
        quality="estimate",
        rows_in=profile.rows_in * factor,
        prompts_total=total,
        prompts_unique=unique,
        input_factor=factor,
        selectivity=stats.selectivity(node) if filters_rows(node) else None,
        tokens_per_prompt=per_prompt,
        computed_without_prefix_cache=unique * per_prompt + decode_tokens(tokens, unique),
        plan=plan_side,
        naive=naive_side,
        reason=(f"prompt tokens counted exactly ({len(sequences):,} token sequences)" if exact else "")
        + (f"distinct prompts estimated (HyperLogLog sketch over {profile.prompts_total:,} rows)" if profile.distinct_estimated else ""),
    )


def _plan_flops(tokens: TokenProfile, distinct, unique, shared_paid, model: ModelProfile | None) -> float:
    """FLOPs with prefix reuse: each segment's tokens attend to the context up to their position."""
    if model is None:
        return 0.0
    flops, start = 0.0, 0.0
    pieces = [(0.0 if shared_paid else 1.0, tokens.shared)]
    pieces += list(zip(distinct, tokens.segments))
    pieces.append((unique, tokens.tail + tokens.label_tails))
    for count, length in pieces:
        flops += count * _token_flops(model, length, start)
        start += length
    flops += unique * _token_flops(model, max(0.0, tokens.output_tokens - 1), start)
    return flops


def _naive_flops(tokens: TokenProfile, prompts: float, model: ModelProfile | None) -> float:
    if model is None:
        return 0.0
    length = tokens.prompt_tokens + tokens.label_tails
    per_prompt = _token_flops(model, length, 0.0) + _token_flops(model, max(0.0, tokens.output_tokens - 1), length)
    return prompts * per_prompt


def _token_flops(model: ModelProfile, count: float, start: float) -> float:
    """`count` tokens at positions start.. : the engine's own formula (ModelProfile.flops)."""
    return model.flops(count, start)


def _side(prompts, tokens_run, flops, hardware: Hardware, model: ModelProfile | None, tokens: TokenProfile, batched: bool) -> Side:
    if model is None or prompts <= 0:
        return Side(prompts, tokens_run, flops, 0.0, 0.0)
    reachable = hardware.peak_flops * hardware.efficiency
    weight_read = model.weight_bytes / hardware.memory_bandwidth
    decode_steps = max(0.0, tokens.output_tokens - 1)
    if batched:
        prefill_passes = math.ceil(max(1.0, tokens_run - prompts * decode_steps) / BATCH_TOKENS)
        decode_passes = math.ceil(prompts / DECODE_BATCH) * decode_steps
    else:
        prefill_passes = prompts
        decode_passes = prompts * decode_steps
    passes = prefill_passes + decode_passes
    time_s = max(flops / reachable, passes * weight_read)
    measured = hardware.planned_tokens_per_s if batched else (hardware.naive_tokens_per_s or hardware.planned_tokens_per_s)
    if measured:
        time_s = tokens_run / measured  # calibrated: what this engine did with this model before
        if batched and decode_steps:
            # generated tokens by decode passes (each steps a batch of answers by one token), the rest
            # (prompts, the first answer token) at prefill's rate; a pass unmeasured is priced as the
            # FLOP model prices it (the weights read once a pass)
            generated = prompts * decode_steps
            per_pass = hardware.decode_pass_s or max(weight_read, _token_flops(model, DECODE_BATCH, tokens.prompt_tokens) / reachable)
            time_s = max(tokens_run - generated, 0.0) / measured + decode_passes * per_pass
    return Side(prompts, tokens_run, flops, time_s, time_s * hardware.price_per_hour / 3600, passes)


# The planner's one table of request kinds: a kind with its own cost shape has an entry; SCORE and
# GENERATE prompts share the prefix-tree model (_estimate_prompts). The executor's table is
# aisql.executor.answers.request_kinds.KINDS.
ESTIMATORS: dict[Request, Callable[[AINode, Statistics, Hardware], NodeEstimate]] = {
    Request.EMBED: _estimate_embedding,
    Request.AGGREGATE: _estimate_aggregate,
}
