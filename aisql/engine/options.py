"""How the engine computes: `EngineOptions`, declared once with the names each option accepts.

The CLI's choices, the Python API, the DuckDB functions, the Ray workers and the serve replicas
all build this one frozen value; it refuses a bad value when built (one line naming the option),
so no door can hand the loader a dtype or policy it would only trip over later.
"""

from __future__ import annotations

from dataclasses import dataclass

from aisql.engine.kv.eviction import POLICIES as KV_EVICTIONS
from aisql.engine.model.numerics import DTYPES, QUANTIZATIONS, check_device
from aisql.errors import AisqlError

# Serving: tokens per forward pass (every running request's decode plus prompt chunks), measured
# on the agent trace with SmolLM2 on 2 cores (benchmarks/RESULTS.md §39): small enough that a turn
# being prefilled does not stall the decoding requests for long, large enough that a prompt still
# arrives in a few passes.
DEFAULT_PASS_TOKENS = 128

DTYPE_CHOICES = ("auto", *DTYPES)  # --dtype: auto is float32 on CPU unless a faster one is measured to agree


@dataclass(frozen=True)
class EngineOptions:
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    dtype: str = "auto"  # auto (float32 on CPU, bfloat16 on CUDA) | float32 | bfloat16 | float16
    max_batch_tokens: int | None = None  # padded new tokens per forward pass; default per device
    max_batch_size: int | None = None
    kv_budget: int | None = None  # bytes for the prefix KV cache; default from free memory
    kv_eviction: str = "reuse"  # which cached prefixes go first when it is full: "reuse" | "lru" (aisql.engine.kv.eviction)
    prefix_cache: bool = True
    speculative: bool = True  # prompt-lookup speculative decoding (lossless)
    quantize: str | None = None  # None | "int8" (CPU) | "fp8" (weights) | "bf16" (weights)
    threads: int | None = None  # CPU threads; None: the idle usable cores, re-read as load changes (aisql.engine.threads)
    vllm_block_size: int | None = None  # vllm: engines: KV block size (default 32 on CPU, 16 on GPU)
    request_timeout: float | None = None  # openai: engines: seconds one request may wait (default: remote.DEFAULT_REQUEST_TIMEOUT)

    def __post_init__(self) -> None:
        check_device(self.device)
        _one_of("dtype", self.dtype, DTYPE_CHOICES)
        _one_of("kv_eviction", self.kv_eviction, KV_EVICTIONS)
        if self.quantize is not None:
            _one_of("quantize", self.quantize, QUANTIZATIONS)
        for name, least in (("max_batch_tokens", 1), ("max_batch_size", 1), ("kv_budget", 0), ("threads", 1), ("vllm_block_size", 1)):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
                raise AisqlError(f"engine option {name} must be a whole number, {least} or more, got {value!r}")
        if self.request_timeout is not None and not (isinstance(self.request_timeout, (int, float)) and self.request_timeout > 0):
            raise AisqlError(f"engine option request_timeout must be a number of seconds above 0, got {self.request_timeout!r}")


def _one_of(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise AisqlError(f"engine option {name} must be one of {', '.join(choices)}, got {value!r}")
