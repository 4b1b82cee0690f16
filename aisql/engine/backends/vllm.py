"""VLLMEngine: the same Engine interface on vLLM (optional extra `aisql[vllm]`, CUDA machines).

`--model vllm:ID_OR_PATH`. vLLM brings its own paged KV cache with automatic prefix caching, its
scheduler and kernels; aisql brings the prompts in prefix order.

- Scoring: one request per prompt with max_tokens=1, sampling restricted to the labels' first
  tokens (`allowed_token_ids`) and logprobs computed after that restriction
  (`logprobs_mode="processed_logprobs"`): the label distribution renormalised over the labels,
  exactly what HFEngine computes. Labels longer than one token add their tails' log-likelihood
  from `prompt_logprobs` on prompt + label.
- Generation: greedy, with vLLM's n-gram (prompt lookup) speculative decoding.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Sequence

from aisql.extras import install_hint
from aisql.engine.decoding.constrained import refuse_grammar
from aisql.engine.base import EngineStats, GenerateRequest, Generation, LabelScores, ModelInfo, ScoreRequest, logsumexp
from aisql.engine.model.fingerprint import vllm_fingerprint
from aisql.engine.model.prompt_format import EncodesPrompts, PromptFormat
from aisql.errors import ModelError


def _on_cpu(vllm) -> bool:
    try:
        from vllm.platforms import current_platform

        return bool(current_platform.is_cpu())
    except Exception:  # noqa: BLE001 - an older vLLM, or the test stand-in
        return getattr(vllm, "ON_CPU", False)


def load_vllm_engine(model: str, options) -> "VLLMEngine":
    try:
        import vllm  # noqa: F401
    except ImportError:
        raise ModelError(
            "the vLLM backend needs the vllm package, which is not installed",
            hint=f"on a CUDA machine: {install_hint('vllm')}; or drop the vllm: prefix to use the built-in engine",
        ) from None
    return VLLMEngine(model, options)


class VLLMEngine(EncodesPrompts):
    reads_states = False  # hidden states do not cross its API: labelled examples fit no probe
    pool = None  # one engine, not a worker pool (Engine.pool)

    def __init__(self, model: str, options) -> None:
        import vllm

        on_cpu = _on_cpu(vllm)
        kwargs = dict(model=model, enable_prefix_caching=options.prefix_cache, logprobs_mode="processed_logprobs")
        # Prefix caching works in whole blocks: vLLM's CPU default of 128 tokens recomputes most
        # shared prefixes (47,864 computed tokens on a query that needs 19,736 with 32).
        kwargs["block_size"] = options.vllm_block_size or (32 if on_cpu else 16)
        if options.speculative:
            kwargs["speculative_config"] = {
                "method": "ngram",
                "num_speculative_tokens": 5,
                "prompt_lookup_max": 4,
                "prompt_lookup_min": 2,
            }
        if options.quantize:
            kwargs["quantization"] = {"fp8": "fp8", "int8": "bitsandbytes"}.get(options.quantize, options.quantize)
        # The embedded engine computes in float32 on CPU; vLLM's CPU default is bfloat16, which
        # moves scores across ties (13 of 217 rows of a query): the same dtype, unless asked.
        if options.dtype != "auto":
            kwargs["dtype"] = options.dtype
        elif on_cpu:
            kwargs["dtype"] = "float32"
        if on_cpu and "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
            # vLLM's CPU backend takes its KV cache as a share of all memory (0.9 by default),
            # which fails beside anything else loaded (a DuckDB session, another model).
            kwargs["gpu_memory_utilization"] = 0.3
        try:
            self.llm = vllm.LLM(**kwargs)
        except Exception as err:
            raise ModelError(f"vLLM cannot load {model}: {type(err).__name__}: {str(err).splitlines()[0]}") from None
        self._vllm = vllm
        tokenizer = self.llm.get_tokenizer()
        self.tokenizer = tokenizer
        self.format = PromptFormat(tokenizer)
        config = self.llm.llm_engine.model_config
        self.info = ModelInfo(
            name=f"vllm:{model}",
            source="vllm",
            device="cpu" if on_cpu else "cuda",
            dtype=str(getattr(config, "dtype", "auto")).replace("torch.", ""),
            max_context=int(getattr(config, "max_model_len", 4096)),
            fingerprint=vllm_fingerprint(model, options),
            note=f"weights quantized to {options.quantize} (opt-in)" if options.quantize else None,
            quantization=options.quantize,
        )
        self.stats = EngineStats()
        self.stop_ids = [t for t in {tokenizer.eos_token_id} if t is not None]
        self.block_size = kwargs["block_size"]

    def facts(self):
        from aisql.engine.base import ModelFacts
        from aisql.engine.model.facts import cached_profile

        from aisql.engine.model.hub import hub_snapshot
        from aisql.engine.model.numerics import DTYPES

        model = self.info.name[len("vllm:") :]
        directory = model if Path(model).is_dir() else hub_snapshot(model, weights=False)
        profile = cached_profile(directory, self.info.name, self.info.dtype if self.info.dtype in DTYPES else "bfloat16")
        return ModelFacts(format=self.format, profile=profile, encode_label=self.encode_label)

    def reset_cache(self) -> None:
        """Forget vLLM's cached prefixes (its automatic prefix cache)."""
        reset = getattr(self.llm, "reset_prefix_cache", None)
        if reset is not None:
            reset()

    def score(self, requests: Sequence[ScoreRequest], *, reuse: bool = True) -> list[LabelScores]:
        SamplingParams = self._vllm.SamplingParams
        firsts = [sorted({label[0] for label in r.label_ids}) for r in requests]
        params = [
            SamplingParams(max_tokens=1, temperature=0.0, allowed_token_ids=first, logprobs=len(first))
            for first in firsts
        ]
        outputs = self.llm.generate([{"prompt_token_ids": list(r.prompt_ids)} for r in requests], params, use_tqdm=False)
        self._count(requests, outputs)
        tails = self._tails(requests)
        results = []
        for index, (request, output) in enumerate(zip(requests, outputs)):
            first_logprobs = output.outputs[0].logprobs[0]
            values = []
            for k, label in enumerate(request.label_ids):
                entry = first_logprobs.get(label[0])
                value = entry.logprob if entry is not None else -math.inf
                values.append(value + tails.get((index, k), 0.0))
            total = logsumexp(values)
            results.append(LabelScores(tuple(v - total for v in values)))
        self.stats.score_requests += len(requests)
        return results

    def _tails(self, requests: Sequence[ScoreRequest]) -> dict[tuple[int, int], float]:
        """log P(label[1:] | prompt, label[0]) from prompt logprobs of prompt + label."""
        jobs = [(i, k, r, label) for i, r in enumerate(requests) for k, label in enumerate(r.label_ids) if len(label) > 1]
        if not jobs:
            return {}
        params = self._vllm.SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        prompts = [{"prompt_token_ids": list(r.prompt_ids) + list(label)} for _, _, r, label in jobs]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        self._count([ScoreRequest(tuple(p["prompt_token_ids"]), ()) for p in prompts], outputs)
        tails = {}
        for (i, k, request, label), output in zip(jobs, outputs):
            start = len(request.prompt_ids) + 1
            tails[(i, k)] = sum(
                output.prompt_logprobs[start + j][token].logprob for j, token in enumerate(label[1:])
            )
        return tails

    def generate(
        self, requests: Sequence[GenerateRequest], *, reuse: bool = True, speculative: bool = True
    ) -> list[Generation]:
        refuse_grammar(requests, "the vllm: engine")
        params = [
            self._vllm.SamplingParams(max_tokens=r.max_tokens, temperature=0.0, stop_token_ids=self.stop_ids)
            for r in requests
        ]
        outputs = self.llm.generate([{"prompt_token_ids": list(r.prompt_ids)} for r in requests], params, use_tqdm=False)
        self._count(requests, outputs)
        results = []
        for output in outputs:
            completion = output.outputs[0]
            tokens = [t for t in completion.token_ids if t not in self.stop_ids]
            stopped = completion.finish_reason == "stop"
            results.append(
                Generation(
                    token_ids=tuple(tokens),
                    text=completion.text.strip(),
                    finish_reason="stop" if stopped else "length",
                    steps=len(tokens) + (1 if stopped else 0),
                )
            )
            self.stats.generated_tokens += len(completion.token_ids)
        self.stats.generate_requests += len(requests)
        return results

    def _count(self, requests, outputs) -> None:
        for request, output in zip(requests, outputs):
            cached = getattr(output, "num_cached_tokens", 0) or 0
            self.stats.kv_hit_tokens += cached
            self.stats.computed_tokens += len(request.prompt_ids) - cached
        self.stats.forward_passes += 1  # one engine call; vLLM schedules its own steps

