"""HFEngine: a transformers causal LM run in-process with torch, on CPU or CUDA.

Scoring is one batched forward pass over the prompts (right-padded: padding sits after every
real token, so causal attention never lets a real position see it and no mask is needed). Only
the output-head rows of each request's label tokens are multiplied at the last prompt position.
Labels longer than one token continue from the prompts' KV cache in a second pass, so a prompt is
computed once however many labels it has. Generation is batched greedy decoding over the same
cache, dropping finished rows as they stop.
"""

from __future__ import annotations

import inspect
import threading
from typing import Iterable, Sequence

import torch

from aisql.engine.base import (
    EngineStats,
    GenerateRequest,
    Generation,
    LabelScores,
    ModelInfo,
    ScoreRequest,
)
from aisql.errors import ModelError

PLAIN_FORMAT = "{instruction}\n\n{text}\n\nAnswer:"
_SENTINEL = "\u0000AISQL_TEXT\u0000"


class HFEngine:
    def __init__(
        self,
        model,
        tokenizer,
        info: ModelInfo,
        *,
        max_batch_tokens: int = 16384,
        max_batch_size: int = 64,
    ) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.info = info
        self.stats = EngineStats()
        self.max_batch_tokens = max_batch_tokens
        self.max_batch_size = max_batch_size
        self.decoder = model.get_decoder()
        self.lm_head = model.get_output_embeddings()
        params = inspect.signature(self.decoder.forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"
        self.device = next(model.parameters()).device
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.stop_ids = _stop_ids(model, tokenizer)
        self.uses_chat_template = bool(getattr(tokenizer, "chat_template", None))
        self._lock = threading.RLock()
        self._formats: dict[str, tuple[str, str] | None] = {}
        config = model.config
        self._softcap = getattr(config, "final_logit_softcapping", None)
        self._logit_scale = getattr(config, "logit_scale", None)
        self._logits_scaling = getattr(config, "logits_scaling", None)

    # ---- prompt format ---------------------------------------------------------------------
    def encode_prompt(self, instruction: str, text: str) -> tuple[int, ...]:
        return self.encode_prompts(instruction, [text])[0]

    def encode_prompts(self, instruction: str, texts: Sequence[str]) -> list[tuple[int, ...]]:
        if not texts:
            return []
        rendered = self._render(instruction, texts)
        add_special = not self.uses_chat_template
        encoded = self.tokenizer(rendered, add_special_tokens=add_special)["input_ids"]
        return [tuple(ids) for ids in encoded]

    def encode_label(self, label: str) -> tuple[int, ...]:
        text = label if self.uses_chat_template else " " + label
        ids = tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        if not ids:
            raise ModelError(f"label {label!r} encodes to no tokens")
        return ids

    def _render(self, instruction: str, texts: Sequence[str]) -> list[str]:
        """Full prompt strings. A chat template is rendered once with a sentinel and split, when
        it reproduces the text verbatim (checked), instead of once per prompt."""
        if not self.uses_chat_template:
            return [PLAIN_FORMAT.format(instruction=instruction, text=t) for t in texts]
        if instruction not in self._formats:
            self._formats[instruction] = self._split_format(instruction)
        fmt = self._formats[instruction]
        if fmt is None:
            return [self._apply_chat(instruction, t) for t in texts]
        before, after = fmt
        return [before + t + after for t in texts]

    def _split_format(self, instruction: str) -> tuple[str, str] | None:
        rendered = self._apply_chat(instruction, _SENTINEL)
        if rendered.count(_SENTINEL) != 1:
            return None
        before, after = rendered.split(_SENTINEL)
        probe = "Probe text, with  spaces\nand lines. "
        if self._apply_chat(instruction, probe) != before + probe + after:
            return None
        return before, after

    def _apply_chat(self, instruction: str, text: str) -> str:
        messages = [{"role": "system", "content": instruction}, {"role": "user", "content": text}]
        kwargs = dict(tokenize=False, add_generation_prompt=True, enable_thinking=False)
        try:
            return self.tokenizer.apply_chat_template(messages, **kwargs)
        except Exception:  # templates without a system role
            merged = [{"role": "user", "content": f"{instruction}\n\n{text}"}]
            return self.tokenizer.apply_chat_template(merged, **kwargs)

    # ---- scoring ---------------------------------------------------------------------------
    def score(self, requests: Sequence[ScoreRequest]) -> list[LabelScores]:
        results = self._run_batches(requests, self._score_batch)
        self.stats.score_requests += len(requests)
        return results

    def _score_batch(self, batch: list[ScoreRequest]) -> list[LabelScores]:
        lens = [len(r.prompt_ids) for r in batch]
        needs_tail = any(len(label) > 1 for r in batch for label in r.label_ids)
        cache = self._new_cache() if needs_tail else None
        hidden = self._prefill([r.prompt_ids for r in batch], cache)
        last = hidden[torch.arange(len(batch), device=self.device), torch.tensor(lens, device=self.device) - 1]

        # First label token: only those rows of the output head (the softmax normaliser at this
        # position is the same for every label of a request, so it cancels).
        width = max(len(r.label_ids) for r in batch)
        first = torch.zeros((len(batch), width), dtype=torch.long, device=self.device)
        for b, r in enumerate(batch):
            first[b, : len(r.label_ids)] = torch.tensor([label[0] for label in r.label_ids], device=self.device)
        weights = self.lm_head.weight[first]  # [B, K, H]
        first_logits = torch.einsum("bkh,bh->bk", weights.float(), last.float())
        if getattr(self.lm_head, "bias", None) is not None:
            first_logits = first_logits + self.lm_head.bias[first].float()
        first_logits = self._postprocess_logits(first_logits)

        tails = self._score_tails(batch, lens, cache) if needs_tail else {}
        out = []
        for b, r in enumerate(batch):
            values = first_logits[b, : len(r.label_ids)].clone()
            for k in range(len(r.label_ids)):
                values[k] += tails.get((b, k), 0.0)
            out.append(LabelScores(tuple(torch.log_softmax(values.double(), dim=0).tolist())))
        return out

    def _score_tails(self, batch: list[ScoreRequest], lens: list[int], cache) -> dict[tuple[int, int], float]:
        """log P(label[1:] | prompt, label[0]) for labels longer than one token, from the prompts' cache."""
        rows = [(b, k, label) for b, r in enumerate(batch) for k, label in enumerate(r.label_ids) if len(label) > 1]
        prompt_width = max(lens)
        tails: dict[tuple[int, int], float] = {}
        for chunk in self._row_chunks(rows, prompt_width):
            sources = torch.tensor([b for b, _, _ in chunk], device=self.device)
            sub_cache = self._select_cache(cache, sources)
            width = max(len(label) - 1 for _, _, label in chunk)
            ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long, device=self.device)
            mask = torch.zeros((len(chunk), prompt_width + width), dtype=torch.long, device=self.device)
            positions = torch.zeros((len(chunk), width), dtype=torch.long, device=self.device)
            for r, (b, _, label) in enumerate(chunk):
                tail = label[:-1]
                ids[r, : len(tail)] = torch.tensor(tail, device=self.device)
                mask[r, : lens[b]] = 1
                mask[r, prompt_width : prompt_width + len(tail)] = 1
                positions[r] = torch.arange(lens[b], lens[b] + width, device=self.device)
            hidden = self._forward(ids, sub_cache, attention_mask=mask, position_ids=positions)
            real = sum(len(label) - 1 for _, _, label in chunk)
            self.stats.computed_tokens += real
            self.stats.padding_tokens += len(chunk) * width - real
            logprobs = torch.log_softmax(self._postprocess_logits(self.lm_head(hidden).float()), dim=-1)
            for r, (b, k, label) in enumerate(chunk):
                targets = torch.tensor(label[1:], device=self.device)
                steps = torch.arange(len(label) - 1, device=self.device)
                tails[(b, k)] = float(logprobs[r, steps, targets].double().sum())
        return tails

    # ---- generation ------------------------------------------------------------------------
    def generate(self, requests: Sequence[GenerateRequest]) -> list[Generation]:
        results = self._run_batches(requests, self._generate_batch)
        self.stats.generate_requests += len(requests)
        return results

    def _generate_batch(self, batch: list[GenerateRequest]) -> list[Generation]:
        lens = [len(r.prompt_ids) for r in batch]
        prompt_width = max(lens)
        cache = self._new_cache()
        hidden = self._prefill([r.prompt_ids for r in batch], cache)
        last = hidden[torch.arange(len(batch), device=self.device), torch.tensor(lens, device=self.device) - 1]
        next_tokens = self._greedy(last)

        prompt_mask = torch.zeros((len(batch), prompt_width), dtype=torch.long, device=self.device)
        for b, n in enumerate(lens):
            prompt_mask[b, :n] = 1
        outputs: list[list[int]] = [[] for _ in batch]
        finish: list[str | None] = [None] * len(batch)
        steps = [0] * len(batch)
        active = list(range(len(batch)))
        step = 0
        while True:
            still = []
            for row, b in enumerate(active):
                token = int(next_tokens[row])
                steps[b] += 1
                if token in self.stop_ids:
                    finish[b] = "stop"
                    continue
                outputs[b].append(token)
                if len(outputs[b]) >= batch[b].max_tokens:
                    finish[b] = "length"
                    continue
                still.append(row)
            self.stats.generated_tokens += len(active)
            if not still:
                break
            keep = torch.tensor(still, device=self.device)
            if len(still) != len(active):
                cache.batch_select_indices(keep)
            active = [active[row] for row in still]
            feed = next_tokens[keep].unsqueeze(1)
            mask = torch.cat(
                [prompt_mask[active], torch.ones((len(active), step + 1), dtype=torch.long, device=self.device)], dim=1
            )
            positions = torch.tensor([[lens[b] + step] for b in active], device=self.device)
            hidden = self._forward(feed, cache, attention_mask=mask, position_ids=positions)
            self.stats.computed_tokens += len(active)
            next_tokens = self._greedy(hidden[:, -1])
            step += 1
        return [
            Generation(
                token_ids=tuple(outputs[b]),
                text=self.tokenizer.decode(outputs[b], skip_special_tokens=True).strip(),
                finish_reason=finish[b] or "length",
                steps=steps[b],
            )
            for b in range(len(batch))
        ]

    def _greedy(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self._postprocess_logits(self.lm_head(hidden).float())
        return torch.argmax(logits, dim=-1)

    # ---- shared mechanics ------------------------------------------------------------------
    def _run_batches(self, requests: Sequence, run_batch) -> list:
        """Results in request order, computed batch by batch (one engine user at a time)."""
        results: list = [None] * len(requests)
        with self._lock, torch.inference_mode():
            for batch in self._batches(requests):
                for index, result in zip(batch, run_batch([requests[i] for i in batch])):
                    results[index] = result
        return results

    def _prefill(self, prompts: Sequence[Sequence[int]], cache) -> torch.Tensor:
        """Right-padded forward pass over prompts; returns hidden states [B, L, H]."""
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long, device=self.device)
        for b, p in enumerate(prompts):
            ids[b, : len(p)] = torch.tensor(p, device=self.device)
        real = sum(len(p) for p in prompts)
        self.stats.computed_tokens += real
        self.stats.padding_tokens += len(prompts) * width - real
        return self._forward(ids, cache)

    def _forward(self, ids: torch.Tensor, cache, attention_mask=None, position_ids=None) -> torch.Tensor:
        kwargs = {self._cache_kwarg: cache, "use_cache": cache is not None}
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask
        if position_ids is not None:
            kwargs["position_ids"] = position_ids
        self.stats.forward_passes += 1
        return self.decoder(input_ids=ids, **kwargs).last_hidden_state

    def _postprocess_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Model-specific logit transforms that HF applies after the output head."""
        if self._logit_scale is not None:
            logits = logits * self._logit_scale
        if self._logits_scaling is not None:
            logits = logits / self._logits_scaling
        if self._softcap is not None:
            logits = torch.tanh(logits / self._softcap) * self._softcap
        return logits

    def _new_cache(self):
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def _select_cache(self, cache, rows: torch.Tensor):
        """A new cache holding `rows` of `cache` (rows may repeat); `cache` is left intact."""
        selected = self._new_cache()
        for layer_index, layer in enumerate(cache.layers):
            selected.update(layer.keys[rows], layer.values[rows], layer_index)
        return selected

    def _batches(self, requests: Sequence) -> Iterable[list[int]]:
        """Consecutive runs of requests whose padded size fits the batch budget (order kept)."""
        batch: list[int] = []
        width = 0
        for index, request in enumerate(requests):
            n = len(request.prompt_ids)
            extra = getattr(request, "max_tokens", 0)
            new_width = max(width, n + extra)
            if batch and (len(batch) >= self.max_batch_size or new_width * (len(batch) + 1) > self.max_batch_tokens):
                yield batch
                batch, new_width = [], n + extra
            batch.append(index)
            width = new_width
        if batch:
            yield batch

    def _row_chunks(self, rows: list, prompt_width: int) -> Iterable[list]:
        chunk: list = []
        for row in rows:
            if chunk and (len(chunk) + 1) * (prompt_width + len(row[2])) > self.max_batch_tokens:
                yield chunk
                chunk = []
            chunk.append(row)
        if chunk:
            yield chunk


def _stop_ids(model, tokenizer) -> frozenset[int]:
    ids: set[int] = set()
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in eos if isinstance(eos, (list, tuple)) else [eos]:
        if value is not None:
            ids.add(int(value))
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return frozenset(ids)
