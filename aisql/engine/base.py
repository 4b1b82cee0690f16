"""The engine interface: token-level requests in, label scores or generations out.

The engine knows nothing of SQL. It turns (instruction, text) into token ids in the model's own
prompt format, scores label continuations, and decodes greedily. Work is counted in `EngineStats`
so the executor can report what the model really computed next to what naive execution would.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable


@dataclass(frozen=True)
class ScoreRequest:
    """Score each label as the continuation of the prompt."""

    prompt_ids: tuple[int, ...]
    label_ids: tuple[tuple[int, ...], ...]
    # Also return the model's final (post-norm) hidden state where the answer starts: the vector
    # the output head reads to score the labels, so keeping it costs no extra computation. Labelled
    # examples fit a probe on it (aisql.functions.probe). Engines that cannot see it return None.
    keep_state: bool = False

    def standalone_tokens(self) -> int:
        """Tokens a one-request-at-a-time engine runs: the prompt once, then each label's tail."""
        return len(self.prompt_ids) + sum(len(label) - 1 for label in self.label_ids)


@dataclass(frozen=True)
class LabelScores:
    """log P(label | prompt, the answer is one of the labels), per label, in request order."""

    logprobs: tuple[float, ...]
    # The final hidden state at the answer's position (float32 numpy vector), where the request
    # asked for it (ScoreRequest.keep_state) and the engine can see it; else None.
    state: object | None = None

    @property
    def best(self) -> int:
        """Index of the most likely label (the first one on an exact tie)."""
        best_index, best_value = 0, -math.inf
        for i, value in enumerate(self.logprobs):
            if value > best_value:
                best_index, best_value = i, value
        return best_index


@dataclass(frozen=True)
class GenerateRequest:
    prompt_ids: tuple[int, ...]
    max_tokens: int
    grammar: str | None = None  # decode only a literal of this type: 'int', 'double', 'bool' (engine/constrained.py)
    temperature: float = 0.0  # 0: greedy; else seeded sampling (no speculation)
    top_p: float = 1.0
    seed: int | None = None  # the sampling generator's seed: the same draws every time


@dataclass(frozen=True)
class Generation:
    token_ids: tuple[int, ...]  # generated tokens, without the stop token
    text: str
    finish_reason: str  # "stop" (end-of-sequence token) or "length" (max_tokens reached)
    steps: int  # tokens sampled, including a stop token

    def standalone_tokens(self, request: GenerateRequest) -> int:
        """Tokens a one-request-at-a-time engine runs: the prompt, then each sampled token but the last."""
        return len(request.prompt_ids) + max(0, self.steps - 1)


@dataclass
class EngineStats:
    """Cumulative counters of an engine; `since` gives the work between two snapshots."""

    forward_passes: int = 0
    computed_tokens: int = 0  # token positions run through the model and kept (prefill + decode)
    padding_tokens: int = 0  # padded positions run alongside them (wasted work)
    kv_hit_tokens: int = 0  # prompt tokens read from the prefix cache instead of computed
    kv_regret_tokens: int = 0  # tokens computed although they had been computed before
    kv_evicted_bytes: int = 0
    generated_tokens: int = 0
    flops: float = 0.0  # of the token positions run (kept, padded positions excluded)
    decode_passes: int = 0  # forward passes of the decode loop (tokens per pass = generated / passes)
    draft_tokens: int = 0  # speculative tokens proposed and verified
    draft_accepted_tokens: int = 0  # of those, equal to the model's own greedy choice
    score_requests: int = 0
    generate_requests: int = 0
    prefix_recompute_tokens: int = 0  # on a worker pool: prompt tokens computed that another worker had computed (set by the driver)
    tie_confirmed_prompts: int = 0  # bfloat16 near ties scored again in float32 (aisql.engine.model.tie_confirmation)
    tie_confirmed_tokens: int = 0  # the float32 tokens that took
    peak_kv_bytes: int = 0  # high-water mark of the prefix cache (not a counter)
    kv_cached_bytes: int = 0  # prefix cache size now (not a counter)

    _LEVELS = ("peak_kv_bytes", "kv_cached_bytes")

    def copy(self) -> "EngineStats":
        return dataclasses.replace(self)

    def __add__(self, other: "EngineStats") -> "EngineStats":
        """The work of both: counters add up; levels (peak KV, cache size) take the larger. The one
        rule for summing engine work: chunks of a node, samples, the workers of a pool."""
        values = {}
        for f in dataclasses.fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            values[f.name] = max(mine, theirs) if f.name in self._LEVELS else mine + theirs
        return EngineStats(**values)

    def add(self, other: "EngineStats") -> None:
        """`self + other` in place (the runner and the scheduler hold this object)."""
        total = self + other
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(total, f.name))

    def since(self, earlier: "EngineStats") -> "EngineStats":
        values = {}
        for f in dataclasses.fields(self):
            now = getattr(self, f.name)
            values[f.name] = now if f.name in self._LEVELS else now - getattr(earlier, f.name)
        return EngineStats(**values)


@dataclass(frozen=True)
class ModelInfo:
    name: str  # what the user asked for ("tiny", an HF id, a path)
    source: str  # where it was loaded from
    device: str
    dtype: str
    max_context: int
    fingerprint: str  # identifies the weights and tokenizer (for result caches)
    is_test_model: bool = False
    note: str | None = None  # said with every output that used this model
    quantization: str | None = None  # opt-in weight quantization, if any
    kernels: str | None = None  # a matmul kernel other than PyTorch's default, chosen by measurement ("oneDNN linear")

    def label(self) -> str:
        return f"{self.name} ({self.note})" if self.note else self.name


@dataclass(frozen=True)
class ModelProfile:
    """A model's size and shape, for FLOPs and memory (from its config; no weights needed)."""

    name: str
    params: int  # weights multiplied per token in the decoder (embeddings and output head excluded)
    layers: int
    attention_width: int  # query heads x head dim
    kv_bytes_per_token: int
    weight_bytes: int
    max_context: int = 0  # tokens (0: not recorded, a profile cached before aisql knew it)

    def flops(self, tokens: int, start: int) -> float:
        """FLOPs of `tokens` tokens at positions start.. : weights plus attention to their prefix."""
        if tokens <= 0:
            return 0.0
        return tokens * 2.0 * self.params + 4.0 * self.layers * self.attention_width * tokens * (start + (tokens - 1) / 2)


@dataclass(frozen=True)
class ModelFacts:
    """What planning needs of a model without running it: its prompt format and its shape."""

    format: object  # aisql.engine.model.prompt_format.PromptFormat
    profile: ModelProfile
    encode_label: object  # (label: str) -> tuple[int, ...]


@runtime_checkable
class Engine(Protocol):
    """What the executor, the planner's statistics and the benchmarks use of an engine: the
    embedded `HFEngine`, `VLLMEngine` and the remote `RemoteEngine` all provide it."""

    info: ModelInfo
    stats: EngineStats
    format: object  # aisql.engine.model.prompt_format.PromptFormat: the model's prompt framing
    # Several engines behind this one, each with its own prefix cache (aisql.executor.cluster's
    # WorkerPool): the executor then answers a node shard by shard instead of chunk by chunk.
    # None for one engine (embedded, vLLM, remote).
    pool: object | None
    # Whether `score` returns the final hidden state a request asks for (ScoreRequest.keep_state):
    # the built-in engine does; vLLM and remote servers do not.
    reads_states: bool

    def facts(self) -> ModelFacts:
        """Prompt format and shape, for planning."""

    def reset_cache(self) -> None:
        """Forget every cached prefix (benchmarks start cold)."""

    def encode_prompt(self, framing, text: str) -> tuple[int, ...]:
        """Token ids of a prompt in the model's format, ending where the answer starts."""

    def encode_prompts(self, framing, texts: Sequence[str]) -> list[tuple[int, ...]]:
        """`encode_prompt` for many texts at once (fast tokenizers batch this)."""

    def encode_label(self, label: str, framing=None) -> tuple[int, ...]:
        """Token ids of an answer as it follows `encode_prompt`'s ids."""

    def score(self, requests: Sequence[ScoreRequest], *, reuse: bool = True) -> list[LabelScores]:
        """Label scores per request. `reuse=False`: no prefix cache (the naive reference)."""

    def generate(
        self, requests: Sequence[GenerateRequest], *, reuse: bool = True, speculative: bool = True
    ) -> list[Generation]:
        """Continuations: greedy, or seeded sampling where a request sets a temperature.
        `speculative` drafts from the context for greedy rows; the output is the same."""


def logsumexp(values: Sequence[float]) -> float:
    """log(sum(exp(v))) of label log-likelihoods, -inf for none possible."""
    top = max(values)
    if top == -math.inf:
        return top
    return top + math.log(sum(math.exp(v - top) for v in values))
