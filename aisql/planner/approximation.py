"""Approximate mode's targets and budget arithmetic: what explain promises and the cascade keeps.

Pure policy, shared by the planner (explain's line of LLM calls a cascade may make) and the
executor (aisql.executor.approximate.cascade runs it): the sample size, the share of prompts beyond which a
cascade saves too little and the node is evaluated exactly, and which targets a call asks for.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

PROGRESSIVE_STAGES = (0.25, 0.5, 1.0)  # progressive sampling: shares of the sample taken in turn (aisql.executor.approximate.score_first)
MAX_LLM_SHARE = 0.8  # a cascade sending more than this share to the LLM saves too little: exact
TARGET_KEYS = ("recall", "precision", "delta", "sample", "seed", "proxy", "sampling", "join")  # a call's own options of approximate mode
MAX_CANDIDATES = 64  # join as classification lists at most this many candidates per prompt


@dataclass(frozen=True)
class Targets:
    recall: float = 0.9
    precision: float = 0.9
    delta: float = 0.05
    sample: int = 0  # 0: sample_size() decides
    seed: int = 0
    # The proxy: "auto" (a smaller LLM when the run's model costs >= PROXY_COST_RATIO times more,
    # else the embedding model), "embeddings", or a model spec (aisql.executor.approximate.proxy_choice).
    proxy: str = "auto"
    sampling: str = "auto"  # the oracle's sample: auto | progressive | uniform | importance
    join: str = "auto"  # an AI join's strategy (aisql.functions.arguments.JOIN_STRATEGIES); ignored by other calls

    def describe(self) -> str:
        return f"recall >= {self.recall:g}, precision >= {self.precision:g} with probability >= {1 - self.delta:g}"


def sample_size(rows: int) -> int:
    """Prompts the LLM answers to train and calibrate: enough for bounds, a small share of big inputs."""
    return min(rows, max(200, min(1000, rows // 5)))


def call_targets(approximates: bool, hints: Mapping[str, Any], run_default: Targets | None) -> Targets | None:
    """The approximate-mode targets of one call: its own options over the run's (--approximate),
    else the run's, else None (exact). A function without an approximate mode is always exact."""
    if not approximates:
        return None
    own = {k: hints[k] for k in TARGET_KEYS if k in hints}
    if own.get("join") == "exact":
        return None  # exact even under --approximate
    if own or hints.get("approximate"):
        return dataclasses.replace(run_default or Targets(), **own)
    return run_default
