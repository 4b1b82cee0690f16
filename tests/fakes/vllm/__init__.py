"""A stand-in for the subset of vLLM's offline API that aisql's adapter uses, for tests on
machines without vLLM. It runs a transformers model and follows vLLM's documented semantics:
`logprobs_mode="processed_logprobs"` returns logprobs after the `allowed_token_ids` whitelist;
`prompt_logprobs` gives, per prompt position, at least the actual token's logprob; generation is
greedy at temperature 0 and stops at `stop_token_ids`. Not a test double of aisql: of vLLM."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

created: list["LLM"] = []


@dataclass
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 1.0
    allowed_token_ids: list[int] | None = None
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    stop_token_ids: list[int] | None = None


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    token_ids: list[int]
    text: str
    finish_reason: str
    logprobs: list[dict[int, Logprob]] | None = None


@dataclass
class RequestOutput:
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    prompt_logprobs: list[dict[int, Logprob] | None] | None = None
    num_cached_tokens: int = 0


@dataclass
class LLM:
    model: str
    enable_prefix_caching: bool = True
    logprobs_mode: str = "raw_logprobs"
    speculative_config: dict | None = None
    kwargs: dict = field(default_factory=dict)

    def __init__(self, model: str, enable_prefix_caching: bool = True, logprobs_mode: str = "raw_logprobs", speculative_config=None, **kwargs):
        self.model, self.enable_prefix_caching, self.logprobs_mode = model, enable_prefix_caching, logprobs_mode
        self.speculative_config, self.kwargs = speculative_config, kwargs
        self._model = AutoModelForCausalLM.from_pretrained(model).eval()
        self._tokenizer = AutoTokenizer.from_pretrained(model)
        config = self._model.config
        self.llm_engine = SimpleNamespace(model_config=SimpleNamespace(dtype="float32", max_model_len=config.max_position_embeddings, revision=None))
        created.append(self)

    def get_tokenizer(self):
        return self._tokenizer

    def generate(self, prompts, sampling_params, use_tqdm=True):
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        return [self._one(p["prompt_token_ids"], sp) for p, sp in zip(prompts, params)]

    @torch.inference_mode()
    def _one(self, prompt: list[int], sp: SamplingParams) -> RequestOutput:
        prompt_logprobs = None
        if sp.prompt_logprobs is not None:
            logp = torch.log_softmax(self._model(torch.tensor([prompt])).logits[0].double(), dim=-1)
            prompt_logprobs = [None] + [{t: Logprob(float(logp[i - 1, t]))} for i, t in enumerate(prompt) if i > 0]
        tokens, logprobs, finish = list(prompt), [], "length"
        for _ in range(sp.max_tokens):
            logits = self._model(torch.tensor([tokens])).logits[0, -1].double()
            if sp.allowed_token_ids is not None:
                masked = torch.full_like(logits, -torch.inf)
                masked[sp.allowed_token_ids] = logits[sp.allowed_token_ids]
                logits = masked
            logp = torch.log_softmax(logits, dim=-1)
            token = int(torch.argmax(logp))
            if sp.logprobs:
                top = torch.topk(logp, sp.logprobs)
                logprobs.append({int(i): Logprob(float(v)) for v, i in zip(top.values, top.indices)})
            tokens.append(token)
            if sp.stop_token_ids and token in sp.stop_token_ids:
                finish = "stop"
                break
        generated = tokens[len(prompt) :]
        text = self._tokenizer.decode([t for t in generated if t not in (sp.stop_token_ids or [])], skip_special_tokens=True)
        return RequestOutput(prompt, [CompletionOutput(generated, text, finish, logprobs or None)], prompt_logprobs)
