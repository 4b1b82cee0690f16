"""An AI node in approximate mode (opt-in): which way it is answered — an AI join's rewritten
strategies (aisql.executor.joins.join_answers), a smaller LLM as the proxy
(aisql.executor.approximate.score_first) or the embedding model (aisql.executor.approximate.cascade)
— and the proxy LLM's scores through its own answering path. Proxy answers stay in this run.
"""

from __future__ import annotations

import dataclasses

from aisql.errors import AisqlError
from aisql.executor.answers.embedding_vectors import vectors_for
from aisql.executor.answers.prompts import PromptSet
from aisql.executor.approximate.cascade import run_cascade
from aisql.executor.approximate.score_first import run_score_first
from aisql.executor.joins.join_answers import JoinAnswers, JoinNode
from aisql.functions import Task

DEFAULT_LLM_PROXY_SAMPLING = "uniform"  # measured best with Qwen2.5-0.5B standing in for the 1.5B (RESULTS §26)


def answer_approximately(rt: JoinNode, prompts: PromptSet, targets) -> None:
    """The LLM answers a sample and the rows the proxy is unsure of; the proxy the rest."""
    joins = JoinAnswers(rt)
    join = joins.strategy(prompts, targets)
    if join is not None:
        pairs, strategy, why = join
        if strategy == "exact":
            rt.answer(prompts)
            rt.stats.join = {"strategy": "exact", "why": why}
            return
        if strategy != "proxy":
            return joins.answer(prompts, pairs, strategy, why, targets)
        rt.stats.join = {"strategy": "proxy", "why": why}
    session = rt.options.proxies
    choice = session.choose_proxy(targets.proxy) if session is not None else None
    if (choice is None or choice.spec is None) and rt.options.embeddings is None:
        raise AisqlError("approximate mode needs the embedding model, and this run has none")
    rt.stats.prompts_total += sum(prompts.counts.values())
    rt.stats.prompts_unique += len(prompts.counts)
    try:
        if choice is not None and choice.spec is not None:
            answers, report = _by_proxy_llm(rt, prompts, targets, session.proxy_session(choice.spec))
        else:
            embed = lambda texts: vectors_for(texts, rt.options.embeddings, rt.answering)  # noqa: E731
            answers, report = run_cascade(list(prompts.counts), targets, ask_llm=rt.oracle(prompts), embed=embed)
            report.extra["proxy"] = "embeddings"
        if choice is not None:
            report.extra["proxy_why"] = choice.why
    except AisqlError as err:
        raise rt.located(err) from None
    for values, text in prompts.text_of.items():
        rt.values[values] = answers[text]
    rt.stats.approximate = report.to_dict()


def _by_proxy_llm(rt: JoinNode, prompts: PromptSet, targets, proxy_session):
    proxy = ProxyScorer(proxy_session, rt.task, rt.node.id, rt.call.describe(), rt.options)
    sampling = targets.sampling if targets.sampling != "auto" else DEFAULT_LLM_PROXY_SAMPLING
    answers, report = run_score_first(
        list(prompts.counts), targets, ask_llm=rt.oracle(prompts), proxy_scores=proxy, sampling=sampling, pilot=targets.proxy == "auto"
    )
    report.extra.update(proxy.report())
    return answers, report


class ProxyScorer:
    """A proxy LLM's P(yes) for prompts of the oracle's AI.IF task, through the proxy's own
    answering path: its result cache key (its fingerprint), checkpoints and progress line."""

    def __init__(self, session, task: Task, node_id: str, description: str, options) -> None:
        self.session = session
        self.task = task
        self.progress = (f"{node_id}-proxy", f"{description} [proxy {session.model_name()}]")
        # The run's own options — its budget (the proxy's work is paid for too), overflow mode,
        # checkpoints, progress — less what would make the proxy a cascade of its own. Derived,
        # not listed: a list of fields copied is how the budget was once left behind.
        self.answering = session.answering(dataclasses.replace(options, approximate=None, embeddings=None, proxies=None))
        self.scores: dict[str, float] = {}  # a pilot's rows are scored once, not again in the full pass
        self.seen: set[str] = set()
        self.counts = None  # summed over this node's calls

    def __call__(self, texts: list[str]) -> dict[str, float]:
        todo = [t for t in texts if t not in self.scores]
        if todo:
            known, counts = self.answering.answer_texts({t: 1 for t in todo}, self.task, seen=self.seen, progress=self.progress)
            self.scores.update((t, _p_yes(known[t])) for t in todo)
            self.counts = counts if self.counts is None else self.counts + counts
        return {t: self.scores[t] for t in texts}

    def report(self) -> dict:
        counts = self.counts
        used = self.session.model_used()
        out = {"proxy": used.name, "proxy_numerics": used.numerics}
        if counts is not None:
            out.update(proxy_prompts=counts.prompts_unique, proxy_cached=counts.prompts_cached, proxy_evaluated=counts.prompts_evaluated)
        return out


def _p_yes(answer) -> float:
    """P(yes) of a proxy answer; an answer cached before P(yes) was kept scores as its value."""
    if answer.p_yes is not None:
        return float(answer.p_yes)
    return 1.0 if answer.value else 0.0
