"""AI aggregation (AI_AGG, AI_SUMMARIZE_AGG): a group's values reduced to one answer, however many.

A group's values arrive sorted (the binder aggregates `list_sort(list(value))`), so the chunks
below are the same in every run and mode: planned == naive, and a rerun finds every prompt in
the result cache. Like LOTUS's sem_agg:

- map: the values are packed, in order, into prompts that fit the model's context (the task, then
  the values); a group that fits one prompt is answered by that prompt;
- reduce: the partial answers (each at most max_tokens) are packed again, at least two per
  prompt (the context is checked to hold two: `packer_for`; explain counts the same with
  aisql.planner.reduction), until one answer is left. A
  lone partial left over by the packing goes up a level as it is: no prompt ever reduces one.

Every map and reduce prompt is an ordinary GENERATE answer, so partial results are cached and
checkpointed like any other (a kill -9 loses at most the chunk in flight), and all groups' prompts
of one level run as one batch. The group's final answer is kept under the aggregate task's key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Sequence

from aisql.engine.base import Engine
from aisql.engine.model.prompt_format import Framing
from aisql.errors import ModelError
from aisql.executor.store.answer_store import Answer
from aisql.functions import Task
from aisql.planner.reduction import packing_capacity

def stage_task(task: Task) -> Task:
    """The GENERATE task of an aggregate task's map and reduce prompts (their texts differ, so one
    task keys both): the same function, system message and budget."""
    return Task(task.function, Framing(system=task.framing.system), max_tokens=task.max_tokens, stage=True)


def instruction(task: Task) -> str:
    return task.instruction or ""


def map_prompt(description: str, values: Sequence[str]) -> str:
    items = "\n".join(f"[{i}] {v}" for i, v in enumerate(values, 1))
    return f"{description}\n\nItems:\n{items}"


def reduce_prompt(description: str, partials: Sequence[str]) -> str:
    parts = "\n".join(f"[Part {i}] {p}" for i, p in enumerate(partials, 1))
    return (
        f"{description}\n\nThe items were too many to read at once, so the task was answered for each part of "
        f"them separately. Combine these partial answers into one answer to the task over all the items:\n{parts}"
    )


# ---- packing ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Packer:
    """Packs texts into prompts that fit: `capacity` tokens for the items of one prompt."""

    capacity: int
    count: Callable[[Sequence[str]], list[int]]  # tokens of each text

    def chunks(self, items: Sequence[str], reduce: bool) -> list[list[str]]:
        sizes = self.count([f"[Part {i}] {t}\n" if reduce else f"[{i}] {t}\n" for i, t in enumerate(items, 1)])
        out: list[list[str]] = []
        current: list[str] = []
        used = 0
        for item, size in zip(items, sizes):
            if current and used + size > self.capacity:
                out.append(current)
                current, used = [], 0
            current.append(item)
            used += size
        if current:
            out.append(current)
        return out


def packer_for(engine: Engine, task: Task) -> Packer:
    """The packing capacity of this engine for this task: the context less the framing, the
    answer and a margin; it must hold two partial answers, else the reduction could not end."""
    max_tokens = task.max_tokens or 1
    framing = Framing(system=task.framing.system)
    overhead = len(engine.encode_prompts(framing, [reduce_prompt(instruction(task), [])])[0])
    capacity = packing_capacity(engine.info.max_context, overhead, max_tokens)
    needed = 2 * (max_tokens + 8)
    if capacity < needed:
        raise ModelError(
            f"the model's context ({engine.info.max_context} tokens) cannot hold two partial answers of {max_tokens} tokens "
            "with the task: the hierarchical reduction could not end",
            hint="shorten the task description or use a model with a longer context",
        )
    return Packer(capacity, engine.format.count_tokens)


# ---- evaluation ---------------------------------------------------------------------------------------
AnswerMany = Callable[[Task, dict[str, int]], dict[str, Answer]]  # (stage task, text -> rows) -> answers


def reduce_groups(groups: Sequence[str], task: Task, packer: Packer, answer: AnswerMany) -> tuple[dict[str, Answer], int]:
    """Final answers of `groups` (each a JSON list of the group's sorted values), all groups'
    prompts of a level batched together; and the depth reached."""
    stage = stage_task(task)
    description = instruction(task)
    items = {group: [str(v) for v in json.loads(group)] for group in groups}
    finals: dict[str, Answer] = {}
    costs = {group: 0 for group in groups}
    level = 0
    while items:
        level += 1
        prompts: dict[str, list[str]] = {}  # group -> this level's prompt texts
        carried: dict[str, list[str]] = {}
        for group, values in items.items():
            reduce = level > 1
            chunks = packer.chunks(values, reduce)
            if reduce and len(chunks[-1]) == 1 and len(chunks) > 1:
                carried[group] = chunks.pop()  # a lone partial goes up as it is
            prompts[group] = [reduce_prompt(description, c) if reduce else map_prompt(description, c) for c in chunks]
        counts: dict[str, int] = {}
        for texts in prompts.values():
            for text in texts:
                counts[text] = counts.get(text, 0) + 1
        answered = answer(stage, counts)
        next_items: dict[str, list[str]] = {}
        for group, texts in prompts.items():
            partials = [str(answered[t].value) for t in texts] + carried.get(group, [])
            costs[group] += sum(answered[t].cost for t in texts)
            if len(partials) == 1:
                finals[group] = Answer(value=partials[0], cost=costs[group])
            else:
                next_items[group] = partials
        items = next_items
    return finals, level
