"""Ask the engine for the answers to a set of distinct prompt texts of one task.

Prompts are encoded in the model's format, checked against its context length before anything
runs (or truncated, if asked), and ordered by token ids — depth-first over their prefix tree — so
prompts sharing a prefix are adjacent (the engine's batches and KV cache both profit). The caller
may run the ordered prompts in chunks, committing answers after each one.
"""

from __future__ import annotations

from typing import Callable, Sequence

from aisql.engine.model.prompt_format import encode_labels
from aisql.engine.base import Engine
from aisql.errors import ModelError
from aisql.executor.store.answer_store import Answer
from aisql.executor.answers.request_kinds import Prepared, kind_of
from aisql.functions import Task

from aisql.executor.options.option_rules import OVERFLOW_MODES  # noqa: F401 - where the executor reads it


class ContextOverflow(ModelError):
    """A prompt does not fit the model's context (and --on-overflow is error)."""


def prepare(
    engine: Engine,
    task: Task,
    texts: Sequence[str],
    *,
    group_by: Callable[[str], tuple] | None = None,
    on_overflow: str = "error",
    fixed_text: str = "",
) -> list[Prepared]:
    """Encode `texts` and put them in evaluation order (token order within `group_by` groups —
    an AI join's anchor values when the anchor is not the prompt's leading part). `fixed_text`:
    what every text holds whatever the row (a PROMPT template's own words, its values empty) —
    where it fills the context, an overflow is the call's, not a row's."""
    if not texts:
        return []
    ids = engine.encode_prompts(task.framing, list(texts))
    label_ids = encode_labels(engine.encode_label, engine.format.end_of_answer, task.labels, task.framing) if kind_of(task).labels else ()
    needed = max((len(label) for label in label_ids), default=1)  # the longest answer scored after a prompt
    if any(len(prompt) + needed > engine.info.max_context for prompt in ids):
        _refuse_an_oversized_framing(engine, task, needed, fixed_text)
    items = [_fit(engine, task, text, prompt, needed, on_overflow) for text, prompt in zip(texts, ids)]
    if group_by is None:
        return sorted(items, key=lambda p: p.ids)
    return sorted(items, key=lambda p: (group_by(p.text), p.ids))


def answer_prepared(engine: Engine, task: Task, items: Sequence[Prepared], *, naive: bool = False) -> dict[str, Answer]:
    """Answers for prepared prompts, in one engine call of the task's kind. `naive`: no KV reuse, no speculation."""
    if not items:
        return {}
    return kind_of(task).run(engine, task, items, naive)


def evaluate(engine: Engine, task: Task, texts: Sequence[str], *, naive: bool = False, **options) -> dict[str, Answer]:
    """prepare + run in one go (for small sets: samples, one naive row). An aggregate task's
    texts are groups, reduced by map-reduce over the same calls (aisql.executor.answers.aggregate)."""
    if kind_of(task).groups:
        from aisql.executor.answers import aggregate

        def answer(stage: Task, counts: dict[str, int]) -> dict[str, Answer]:
            return answer_prepared(engine, stage, prepare(engine, stage, list(counts), **options), naive=naive)

        finals, _ = aggregate.reduce_groups(list(dict.fromkeys(texts)), task, aggregate.packer_for(engine, task), answer)
        return finals
    return answer_prepared(engine, task, prepare(engine, task, texts, **options), naive=naive)


def _fit(engine: Engine, task: Task, text: str, prompt: tuple[int, ...], needed: int, on_overflow: str) -> Prepared:
    limit = engine.info.max_context
    if len(prompt) + needed <= limit:
        return Prepared(text, prompt)
    if on_overflow == "truncate":
        # Keep the prompt's end (the chat template's closing, where the answer starts) and cut
        # the text before it.
        keep_end = min(len(prompt), _suffix_tokens(engine, engine.format.frame(task.framing)[1]))
        head = limit - needed - keep_end
        return Prepared(text, prompt[:head] + prompt[len(prompt) - keep_end :], truncated=True)
    preview = text[:60] + ("..." if len(text) > 60 else "")
    raise ContextOverflow(
        f"a prompt of {len(prompt)} tokens does not fit the model's context of {limit} tokens: {preview!r}",
        hint="shorten the values in the prompt (e.g. left(col, 2000)), use --on-overflow truncate, or a model with a longer context",
    )


MIN_ROW_TOKENS = 32  # what a truncated prompt keeps of the row's own text, at the least


def _refuse_an_oversized_framing(engine: Engine, task: Task, needed: int, fixed_text: str = "") -> None:
    """A prompt over the context is the row's fault only when the call's own text (its
    instruction, its labels listed for the model, its PROMPT template's own words) leaves room
    for a row: otherwise every row overflows, and truncating would cut the row's text away
    entirely (the answer would no longer depend on the row). Said as the call's, with or without
    --on-overflow truncate."""
    framing = len(engine.encode_prompts(task.framing, [""])[0])
    own = len(engine.encode_prompts(task.framing, [fixed_text])[0]) if fixed_text else framing
    limit = engine.info.max_context
    if own + needed + MIN_ROW_TOKENS <= limit:
        return
    labels = f" (its {len(task.labels):,} labels are listed for the model)" if len(task.labels) > 2 else ""
    if framing + needed + MIN_ROW_TOKENS > limit:
        raise ContextOverflow(
            f"the call's own instruction takes {framing:,} tokens{labels} before any row's text: the model's context is {limit:,} tokens",
            hint="fewer labels (classify in stages: a coarse AI.CLASSIFY first, then one per group), or a model with a longer context",
        )
    raise ContextOverflow(
        f"the PROMPT template's own text takes {own - framing:,} tokens (with the call's instruction {own:,}) before any row's value: "
        f"the model's context is {limit:,} tokens",
        hint="shorten the template's text, or a model with a longer context",
    )


def _suffix_tokens(engine: Engine, suffix: str) -> int:
    return engine.format.count_tokens([suffix])[0] if suffix else 0
