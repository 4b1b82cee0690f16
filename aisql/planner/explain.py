"""Render plans with their cost estimates: a rich tree for people, a dict (JSON) for programs.

Per AI node: rows in, prompts total and unique, then tokens, FLOPs, time and money for the plan
next to naive execution; totals at the end. Counts are exact where a node's input needs no AI
answer, estimates (scaled by the selectivities shown) where earlier AI predicates shrink it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from aisql.functions.decision import CONTENT_FREE_INPUTS, MAX_EXAMPLES
from aisql.planner.approximation import MAX_LLM_SHARE, PROGRESSIVE_STAGES, call_targets, sample_size
from aisql.planner.cost import NodeEstimate, PlanEstimate, Side
from aisql.planner.hardware import Hardware
from aisql.planner.plan import AINode, Plan, Strategy

if TYPE_CHECKING:
    from rich.tree import Tree

BUSY_CORES = 0.5  # other work on this many cores while speed was measured: said beside the estimate


class _Discard:
    """A file that drops what is written (rich renders into its capture or record instead)."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


@dataclass
class Explanation:
    """The plans of a script's statements with their estimates, for people (`tree`) and programs (`to_dict`)."""

    plans: list[Plan]
    estimates: list[PlanEstimate | None] = field(default_factory=list)
    hardware: Hardware | None = None
    model: str | None = None
    load_s: float | None = None  # the model's load time, when it is not loaded yet
    load_estimated_from: int | None = None  # None: load_s was measured; else the other models' loads it is estimated from
    shard_plans: dict[str, dict] = field(default_factory=dict)  # node id -> its shard plan on `workers` (explain --workers)
    cache_note: str | None = None  # what the result cache changes (everything cached), or why it was not consulted
    measured_load: float | None = None  # cores other work kept busy when the calibrating speed was measured
    proxies: dict[str, str] = field(default_factory=dict)  # node id -> approximate mode's proxy and why
    decisions: dict[str, str] = field(default_factory=dict)  # node id -> its labelled examples' rule and quality, where known
    notes: list[str] = field(default_factory=list)  # which model answers a model named in the query
    first_run: list = field(default_factory=list)  # one-time work before the first answer (aisql.engine.model.first_run.FirstRunCost)
    overhead_s: float | None = None  # a run's time outside its AI nodes (binding, planning, DuckDB), measured in recent runs

    def tree(self) -> Tree:
        header = ""
        if self.hardware is not None:
            hw = self.hardware
            header = (
                f"model {self.model} · hardware {hw.name} ({hw.peak_flops / 1e12:.2f} TFLOP/s peak"
                f"{' measured' if hw.measured else ''}, {hw.memory_bandwidth / 1e9:.0f} GB/s, ${hw.price_per_hour:.2f}/h)"
            )
            if hw.planned_tokens_per_s:
                decode = f", decode {hw.decode_pass_s * 1000:,.0f} ms a pass" if hw.decode_pass_s else ""
                header += f" · time calibrated: {hw.planned_tokens_per_s:,.0f} computed tok/s{decode}, {hw.speed_source or 'measured with this model'}"
                if self.measured_load is not None and self.measured_load >= BUSY_CORES:
                    header += f" while other work kept ~{self.measured_load:.1f} cores busy (estimates may run high on an idle machine)"
            elif self.model:
                header += " · time uncalibrated (FLOP model; a run of this model calibrates it)"
            for cost in self.first_run:
                header += f" · + first run: {cost.what} ~{cost.seconds:,.0f} s, once ({cost.how})"
            if self.load_s is not None:
                loads = self.load_estimated_from
                how = (
                    "measured" if loads is None
                    else "aisql's reference measurement: no model loaded on this machine yet" if loads == 0
                    else f"estimated from {loads} load{'s' if loads != 1 else ''} of other models here"
                )
                header += f" · + model load ~{self.load_s:.1f} s ({how})"
            if self.overhead_s:
                header += f" · + run overhead ~{self.overhead_s:.1f} s (binding, planning, DuckDB; measured)"
            if self.cache_note:
                header += f" · {self.cache_note}"
        for note in self.notes:
            header += f"\nnote: {note}"
        calibrated = bool(self.hardware and self.hardware.planned_tokens_per_s)
        return plans_tree(self.plans, self.estimates, header, calibrated, self.shard_plans, self.proxies, self.decisions)

    # ---- printable: print(con.explain(q)), rich consoles, notebooks ---------------------------
    def __str__(self) -> str:
        from rich.console import Console

        console = Console(width=110, file=_Discard(), color_system=None, force_terminal=False)
        with console.capture() as captured:
            console.print(self.tree())
        return captured.get().rstrip("\n")

    def __rich__(self) -> Tree:
        return self.tree()

    def _repr_html_(self) -> str:
        """The tree as HTML, for Jupyter."""
        from rich.console import Console

        console = Console(record=True, width=110, file=_Discard(), force_terminal=True)
        console.print(self.tree())
        return console.export_html(inline_styles=True)

    def to_svg(self, title: str = "aisql explain") -> str:
        """The tree as an SVG picture (prompts, tokens, time and $ per node, as the terminal
        shows them): `aisql explain --format svg > plan.svg`, opened in any browser."""
        from rich.console import Console

        console = Console(record=True, width=110, file=_Discard(), force_terminal=True)
        console.print(self.tree())
        return console.export_svg(title=title)

    def to_dict(self) -> dict:
        data = {"statements": [plan_to_dict(p, e, self.shard_plans, self.proxies, self.decisions) for p, e in zip(self.plans, self.estimates)]}
        if self.notes:
            data["notes"] = list(self.notes)
        if self.hardware is not None:
            data["hardware"] = {
                "name": self.hardware.name,
                "peak_flops": self.hardware.peak_flops,
                "memory_bandwidth": self.hardware.memory_bandwidth,
                "price_per_hour": self.hardware.price_per_hour,
                "calibrated_tokens_per_s": self.hardware.planned_tokens_per_s,
            }
            data["model"] = self.model
            data["model_load_s"] = self.load_s
            data["model_load_measured"] = self.load_estimated_from is None
            data["calibrated_while_busy_cores"] = self.measured_load
            data["decode_pass_s"] = self.hardware.decode_pass_s
            data["speed_source"] = self.hardware.speed_source
            data["first_run"] = {cost.what: round(cost.seconds, 2) for cost in self.first_run}
            data["run_overhead_s"] = self.overhead_s
        data["cache_note"] = self.cache_note
        return data


def quality(node: AINode, est: NodeEstimate | None) -> str:
    if est is None or est.quality == "unknown":
        return "unknown"
    if node.strategy is Strategy.STREAMING:
        return "upper bound"
    return "exact" if est.input_factor == 1.0 and node.stop_after is None else "estimate"


def _side(side: Side) -> dict:
    return {
        "prompts": round(side.prompts),
        "tokens": round(side.tokens),
        "passes": round(side.passes),
        "flops": side.flops,
        "time_s": side.time_s,
        "usd": side.usd,
    }


def plan_to_dict(
    plan: Plan,
    estimate: PlanEstimate | None,
    shard_plans: dict[str, dict] | None = None,
    proxies: dict[str, str] | None = None,
    decisions: dict[str, str] | None = None,
) -> dict:
    nodes = []
    for node in plan.nodes:
        est = estimate.node(node.id) if estimate else None
        q = quality(node, est)
        known = q != "unknown"
        nodes.append(
            {
                "id": node.id,
                "type": node.role.value,
                "function": node.call.describe(),
                "position": {"line": node.call.line, "column": node.call.col},
                "clause": node.location.clause.value,
                "scope": node.location.scope_name,
                "strategy": node.strategy.value,
                "note": node.note,
                "depends_on": list(node.depends_on),
                "anchor": node.anchor,
                "estimate": q,
                "estimate_reason": est.reason if est else "",
                "approximate": approximate_line(node, est, (proxies or {}).get(node.id)) if est else None,
                "decision": (decisions or {}).get(node.id) or decision_line(node),
                "rows_in": round(est.rows_in) if known else None,
                "prompts_total": round(est.prompts_total) if known else None,
                "prompts_unique": round(est.prompts_unique) if known else None,
                "input_factor": est.input_factor if known else None,
                "selectivity": {"value": est.selectivity.value, "source": est.selectivity.source} if known and est.selectivity else None,
                "tokens_per_prompt": est.tokens_per_prompt if known else None,
                "computed_tokens_without_prefix_cache": round(est.computed_without_prefix_cache) if known else None,
                "cached_share": est.cached_share if est else None,
                "cached_share_exact": est.cached_share_exact if est else None,
                "plan": _side(est.plan) if known else None,
                "naive": _side(est.naive) if known else None,
                "input_sql": node.input_sql,
                "shard_plan": (shard_plans or {}).get(node.id),
            }
        )
    data = {"statement": plan.statement_sql.strip(), "final_sql": plan.final_sql, "ai_nodes": nodes}
    if estimate is not None:
        data["totals"] = {"plan": _side(estimate.plan), "naive": _side(estimate.naive)}
    return data


def plans_tree(
    plans: Sequence[Plan],
    estimates: Sequence[PlanEstimate | None],
    header: str = "",
    calibrated: bool = False,
    shard_plans: dict | None = None,
    proxies: dict[str, str] | None = None,
    decisions: dict[str, str] | None = None,
) -> Tree:
    from rich.tree import Tree

    root = Tree("[bold]Plan[/bold]" + (f"  [dim]{header}[/dim]" if header else ""))
    for index, (plan, estimate) in enumerate(zip(plans, estimates), start=1):
        first = " ".join(_without_comments(plan.statement_sql).split())
        if len(first) > 90:
            first = first[:87] + "..."
        stmt = root.add(f"[bold]statement {index}[/bold]: {first}")
        final = stmt.add("[cyan]DuckDB[/cyan] final query" + ("" if plan.nodes else " (no AI calls)"))
        for node in plan.nodes:
            est = estimate.node(node.id) if estimate else None
            anchor = f", anchor {node.anchor}" if node.anchor else ""
            branch = final.add(
                f"[magenta]{node.role.value}[/magenta] {node.id} {node.call.describe()}  "
                f"[dim]line {node.call.line}, {node.location.clause.value} of {node.location.scope_name}, "
                f"{node.strategy.value}{anchor}[/dim]"
            )
            _estimate_lines(branch, node, est, calibrated, (proxies or {}).get(node.id), (shard_plans or {}).get(node.id))
            rule = (decisions or {}).get(node.id) or decision_line(node)
            if rule:
                branch.add(f"[yellow]{rule}[/yellow]")
            if node.depends_on:
                branch.add(f"[dim]after: {', '.join(node.depends_on)} (uses their answers to filter its input)[/dim]")
            if node.note and (node.strategy is Strategy.STREAMING or node.stop_after is not None):
                expected = f": about {est.plan.prompts:,.0f} prompts expected at this selectivity" if node.stop_after is not None and est and est.plan else ""
                branch.add(f"[dim]{node.note}{expected}[/dim]")
        if estimate is not None and plan.nodes:
            stmt.add("[bold]total[/bold]  " + _cost_line(estimate.naive, estimate.plan, calibrated))
    return root


def _estimate_lines(branch, node: AINode, est, calibrated: bool, proxy: str | None, shards: dict | None) -> None:
    """A node's estimate under its branch: rows and prompts, cost, cache, approximate mode,
    shards, selectivity."""
    q = quality(node, est)
    if q == "unknown":
        reason = f" ({est.reason})" if est and est.reason else ""
        branch.add(f"rows in: ?  prompts total: ?  prompts unique: ?{reason}")
        return
    mark = {"exact": "", "estimate": "~", "upper bound": "≤ "}[q]
    branch.add(
        f"rows in: {mark}{est.rows_in:,.0f}  prompts total: {mark}{est.prompts_total:,.0f}  "
        f"prompts unique: {mark}{est.prompts_unique:,.0f}"
    )
    branch.add(_cost_line(est.naive, est.plan, calibrated))
    if est.cached_share:
        branch.add(f"[green]{cached_line(est)}[/green]")
    if est.reason:
        branch.add(f"[dim]{est.reason}[/dim]")
    cascade = approximate_line(node, est, proxy)
    if cascade:
        branch.add(f"[yellow]{cascade}[/yellow]")
    if shards:
        branch.add(f"[blue]{shard_line(shards)}[/blue]")
    if est.selectivity is not None or est.input_factor != 1.0:
        sel = f"selectivity {est.selectivity.value:.2f} ({est.selectivity.source})" if est.selectivity else ""
        share = f"input {est.input_factor:.0%} of its AI-free rows" if est.input_factor != 1.0 else ""
        branch.add("[dim]" + " · ".join(p for p in (sel, share) if p) + "[/dim]")


def decision_line(node: AINode) -> str | None:
    """What sets the node's decision rule at run time (aisql.functions.decision), and what it adds."""
    hints = node.call.hints
    if "examples" in hints:
        return (
            f"labelled examples: the call's examples query is read and its rows asked first, as prompts of the same call "
            f"(at most {MAX_EXAMPLES:,}; cached; not in these estimates); the rule fitted on them is kept only if it beats "
            "the model's own answers held out"
        )
    calibration = hints.get("calibration")
    if calibration == "content_free":
        return f"content-free calibration: {len(CONTENT_FREE_INPUTS)} more prompts asked first (not in these estimates)"
    if calibration == "batch":
        return "batch calibration: each answer depends on which rows reach the call (labelled in the output)"
    return None


def shard_line(plan: dict) -> str:
    """A node's shard plan on a worker pool (aisql.executor.cluster.shard_plan), in one line."""
    sizes = plan["shard_prompts"] or {"min": 0, "max": 0}
    split = f", {plan['split_groups']} split" if plan["split_groups"] else ", none split"
    line = (
        f"shards on {plan['workers']} workers: {plan['prefix_groups']:,} prefix groups kept whole{split} → "
        f"{plan['shards']:,} shards of {sizes['min']:,}-{sizes['max']:,} prompts · busiest worker "
        f"{plan['makespan_tokens']:,} of {plan['total_tokens']:,} tokens (balance {plan['balance']:.0%}, {plan['speedup']:.2f}x)"
    )
    if plan.get("expected_s") is not None:
        line += f" · expected ~{_duration(plan['expected_s'])}"
    if plan.get("sliced"):
        line += " · read in slices, encoded by the workers"
    return line


def cached_line(est: NodeEstimate) -> str:
    """What the result cache takes off a node's planned cost, in one line."""
    unique = est.prompts_unique or 0
    how = "every prompt looked up" if est.cached_share_exact else "from a sample of its prompts"
    if est.cached_share == 1.0:
        return f"result cache: all {unique:,.0f} answers cached ({how}): the plan asks the model nothing"
    return f"result cache: ~{est.cached_share:.0%} of {unique:,.0f} answers cached ({how}): the plan prices only the rest"


JOIN_LINES = ("join as classification", "embedding-blocked join", "exact join", "per-pair cascade")  # aisql.executor.joins.join_rewrite.plan_line


def approximate_line(node, est, proxy: str | None = None) -> str | None:
    """The cascade an AI.IF in approximate mode runs (its call's options), with the LLM calls it
    may make: the sample at least, at most MAX_LLM_SHARE of the prompts (beyond: exact)."""
    targets = call_targets(node.call.function.approximates, node.call.hints, None)
    if targets is None:
        return None
    unique = int(est.prompts_unique or 0)
    sample = min(unique, targets.sample or sample_size(unique))
    most = max(sample, int(MAX_LLM_SHARE * unique))
    joined = proxy is not None and proxy.startswith(JOIN_LINES)
    llm_proxy = proxy is not None and not proxy.startswith("embeddings") and not joined
    least = sample
    if llm_proxy and targets.sampling == "progressive" and sample < unique:
        least = max(1, round(sample * PROGRESSIVE_STAGES[0]))  # progressive sampling may stop at its first stage
    line = (
        f"approximate (proxy cascade): {targets.describe()} vs the LLM; the LLM answers {least:,} to {most:,} of "
        f"{unique:,} prompts (more would fall back to exact)"
    )
    if joined:
        return line + f"; {proxy}"
    if proxy:
        line += f"; proxy: {proxy}" + (f", which scores all {unique:,} prompts first" if llm_proxy and sample < unique else "")
    return line


def _cost_line(naive: Side, plan: Side, calibrated: bool = False) -> str:
    ratio = f" ({naive.tokens / plan.tokens:.1f}x fewer" + (f", ~{plan.passes:,.0f} passes" if plan.passes else "") + ")" if plan.tokens else ""
    line = f"tokens naive {naive.tokens:,.0f} → plan {plan.tokens:,.0f}{ratio}"
    if naive.flops:
        line += f" · FLOPs {naive.flops:.2e} → {plan.flops:.2e}"
    if naive.time_s:
        bound = "~" if calibrated else "≥"  # measured speed: an estimate; the FLOP model: a lower bound
        line += f" · time {bound} {_duration(naive.time_s)} → {_duration(plan.time_s)} · ${naive.usd:.4f} → ${plan.usd:.4f}"
    return line


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"


def _without_comments(sql: str) -> str:
    return re.sub(r"--[^\n]*|/\*.*?\*/", " ", sql, flags=re.DOTALL)
