"""Render plans: a rich tree for people, a dict (JSON) for programs.

Counts per AI node come from `aisql.executor.estimate` (DuckDB, no model), so the planner's
explain stays a pure function of plans and numbers.
"""

from __future__ import annotations

import re
from typing import Sequence

from rich.tree import Tree

from aisql.planner.plan import Plan


def plan_to_dict(plan: Plan, estimates: dict) -> dict:
    nodes = []
    for node in plan.nodes:
        est = estimates.get(node.id)
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
                "rows_in": est.rows_in if est else None,
                "prompts_total": est.prompts_total if est else None,
                "prompts_unique": est.prompts_unique if est else None,
                "estimate": est.quality if est else "unknown",
                "estimate_reason": est.reason if est else "",
                "input_sql": node.input_sql,
            }
        )
    return {"statement": plan.statement_sql.strip(), "final_sql": plan.final_sql, "ai_nodes": nodes}


def plans_tree(plans: Sequence[Plan], estimates: dict) -> Tree:
    root = Tree("[bold]Plan[/bold]")
    for index, plan in enumerate(plans, start=1):
        first = " ".join(_without_comments(plan.statement_sql).split())
        if len(first) > 90:
            first = first[:87] + "..."
        stmt = root.add(f"[bold]statement {index}[/bold]: {first}")
        final = stmt.add("[cyan]DuckDB[/cyan] final query" + ("" if plan.nodes else " (no AI calls)"))
        for node in plan.nodes:
            est = estimates.get(node.id)
            label = (
                f"[magenta]{node.role.value}[/magenta] {node.id} {node.call.describe()}  "
                f"[dim]line {node.call.line}, {node.location.clause.value} of {node.location.scope_name}, "
                f"{node.strategy.value}[/dim]"
            )
            branch = final.add(label)
            if est is None or est.quality == "unknown":
                reason = f" ({est.reason})" if est and est.reason else ""
                branch.add(f"rows in: ?  prompts total: ?  prompts unique: ?{reason}")
            else:
                bound = "≤ " if est.quality == "upper bound" else ""
                reason = f"  [dim]({est.reason})[/dim]" if est.reason else ""
                branch.add(
                    f"rows in: {bound}{est.rows_in:,}  prompts total: {bound}{est.prompts_total:,}  "
                    f"prompts unique: {bound}{est.prompts_unique:,}{reason}"
                )
            if node.depends_on:
                branch.add(f"[dim]after: {', '.join(node.depends_on)} (uses their answers to filter its input)[/dim]")
            if node.note and node.strategy.value == "streaming":
                branch.add(f"[dim]{node.note}[/dim]")
    return root


def _without_comments(sql: str) -> str:
    return re.sub(r"--[^\n]*|/\*.*?\*/", " ", sql, flags=re.DOTALL)
