"""Rule: the anchor of each AI join — the table whose rows form the outer loop.

A join prompt reads two or more tables. Its prompts are evaluated grouped by the anchor's values,
so each anchor row's part of the prompt is computed once and all its pairs run against it while it
is in the KV cache. The default anchor is the table of the first placeholder: its text comes first
in every prompt, so it is the part prompts can share. `{'anchor': alias}` overrides the choice
(the prompt text, and so the answers, stay the same; only the evaluation order changes).
"""

from __future__ import annotations

import dataclasses


from aisql.errors import BindError
from aisql.planner.context import PlanningContext
from aisql.planner.plan import AINode, Plan


def choose_anchor(plan: Plan, context: PlanningContext) -> Plan:
    return dataclasses.replace(plan, nodes=tuple(_anchor(node) for node in plan.nodes))


def _anchor(node: AINode) -> AINode:
    tables = node.call.argument_tables
    every = set().union(*tables) if tables else set()
    hint = node.call.hints.get("anchor")
    if hint is not None:
        if hint.lower() not in every:
            raise BindError(
                f"{node.call.spelling}: anchor {hint!r} is not a table this prompt reads",
                line=node.call.line,
                col=node.call.col,
                hint=f"tables in the prompt: {', '.join(sorted(every)) or 'none'}",
            )
        anchor = hint.lower()
    elif len(every) >= 2 and len(tables[0]) == 1:
        anchor = next(iter(tables[0]))
    else:
        return node
    args = tuple(i for i, t in enumerate(tables) if t == {anchor})
    return dataclasses.replace(node, anchor=anchor, anchor_args=args)
