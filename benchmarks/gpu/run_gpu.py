"""GPU engine benchmark: a randomly initialised Qwen3-4B-shaped model in bf16, one CUDA device.

    python benchmarks/gpu/run_gpu.py [--out DIR] [--minutes 9]     # on a CUDA machine
    python benchmarks/gpu/run_gpu.py --small --device cpu           # smoke test of the script

Speed does not depend on weight values, so random weights of a real shape measure the engine.
Runs, in order, within the time limit:
  1. checks: scores with radix reuse == without (bf16 tolerance), speculative == greedy output;
  2. engine_prefix: 1,000 prompts (shared 200-token prefix + 20-token tails; and 10 anchors x 100
     tails), no reuse vs radix reuse; logical and computed tokens per minute;
  3. engine_decode: greedy decode tokens/s at batch 1 and 32; prompt-lookup drafts (random weights
     copy nothing, so this shows the overhead) and oracle drafts (the true continuation: the
     ceiling when the model copies, e.g. field extraction).
Writes engine_gpu.json to --out (default $OUT, else benchmarks/results).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))
sys.path.insert(0, str(HERE.parent))

from aisql.engine import GenerateRequest, ModelInfo, ScoreRequest  # noqa: E402
from aisql.engine.backends.hf import HFEngine  # noqa: E402
from aisql.engine.model.loader import default_kv_budget  # noqa: E402

QWEN3_4B = dict(
    hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
    num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
    rope_theta=1_000_000.0, tie_word_embeddings=True, rms_norm_eps=1e-6,
)
SMALL = dict(
    hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=32, vocab_size=32000, max_position_embeddings=4096,
    tie_word_embeddings=True,
)


class Tokens:
    """The few tokenizer attributes the engine reads when prompts arrive as token ids."""

    pad_token_id = 0
    eos_token_id = 1
    chat_template = None

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(map(str, ids))


def build(shape: dict, device: str) -> HFEngine:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    config = Qwen3Config(**shape, eos_token_id=1, pad_token_id=0)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM(config).to(dtype)
    info = ModelInfo("qwen3-4b-shape (random)", "random init", device, str(dtype), shape["max_position_embeddings"], "random")
    on_cuda = device.startswith("cuda")
    return HFEngine(
        model, Tokens(), info,
        max_batch_tokens=65536 if on_cuda else 8192, max_batch_size=256 if on_cuda else 64,
        kv_budget_bytes=default_kv_budget(torch.device(device)),
    )


def timed(fn):
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    started = time.perf_counter()
    value = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return value, time.perf_counter() - started


def prompts_shared(rng, n, vocab):
    prefix = [rng.randrange(3, vocab) for _ in range(200)]
    return sorted(tuple(prefix + [rng.randrange(3, vocab) for _ in range(20)]) for _ in range(n))


def prompts_two_level(rng, n, vocab):
    prefix = [rng.randrange(3, vocab) for _ in range(100)]
    out = []
    for _ in range(10):
        anchor = [rng.randrange(3, vocab) for _ in range(100)]
        out += [tuple(prefix + anchor + [rng.randrange(3, vocab) for _ in range(20)]) for _ in range(n // 10)]
    return sorted(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT") or str(HERE.parent / "results"))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--small", action="store_true", help="a small model shape (smoke test)")
    parser.add_argument("--prompts", type=int, default=1000)
    parser.add_argument("--minutes", type=float, default=9.0)
    args = parser.parse_args()
    deadline = time.perf_counter() + args.minutes * 60
    shape = SMALL if args.small else QWEN3_4B
    vocab = shape["vocab_size"]
    record = {
        "benchmark": "engine_gpu",
        "shape": "small" if args.small else "Qwen3-4B",
        "device": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu",
        "torch": torch.__version__,
    }
    rng = random.Random(0)
    engine, build_s = timed(lambda: build(shape, args.device))
    record["build_s"] = round(build_s, 1)
    labels = ((5,), (6,), (7, 8))
    tol = 5e-2 if args.device.startswith("cuda") else 1e-4  # bf16 on GPU

    # 1. checks
    check = [ScoreRequest(p, labels) for p in prompts_two_level(rng, 40, vocab)]
    reuse = engine.score(check)
    alone = [engine.score([r], reuse=False)[0] for r in check[:10]]
    record["check_scores_max_diff"] = max(abs(a - b) for s, t in zip(reuse, alone) for a, b in zip(s.logprobs, t.logprobs))
    record["check_scores_within_tolerance"] = record["check_scores_max_diff"] < tol
    record["check_answers_equal"] = [s.best for s in reuse[:10]] == [s.best for s in alone]
    gen = [GenerateRequest(r.prompt_ids, 16) for r in check[:8]]
    plain = engine.generate(gen, speculative=False)
    record["check_speculative_equals_greedy"] = [g.token_ids for g in engine.generate(gen)] == [g.token_ids for g in plain]
    print("checks:", {k: v for k, v in record.items() if k.startswith("check")}, flush=True)

    # 2. engine_prefix
    record["prefix"] = {}
    for name, make in (("shared-prefix", prompts_shared), ("two-level", prompts_two_level)):
        if time.perf_counter() > deadline - 120:
            break
        requests = [ScoreRequest(p, labels[:2]) for p in make(rng, args.prompts, vocab)]
        logical = sum(len(r.prompt_ids) for r in requests)
        engine.reset_cache()  # each mode starts with an empty tree
        before = engine.stats.copy()
        _, no_reuse_s = timed(lambda: engine.score(requests, reuse=False))
        mid = engine.stats.copy()
        engine.reset_cache()
        _, reuse_s = timed(lambda: engine.score(requests))
        after = engine.stats.copy()
        computed_no, computed_re = mid.since(before).computed_tokens, after.since(mid).computed_tokens
        record["prefix"][name] = {
            "prompts": len(requests), "logical_tokens": logical,
            "no_reuse_s": round(no_reuse_s, 3), "reuse_s": round(reuse_s, 3), "speedup": round(no_reuse_s / reuse_s, 2),
            "computed_no_reuse": computed_no, "computed_reuse": computed_re,
            "logical_tokens_per_min_reuse": round(logical / reuse_s * 60), "computed_tokens_per_min_reuse": round(computed_re / reuse_s * 60),
            "logical_tokens_per_min_no_reuse": round(logical / no_reuse_s * 60),
            "regret_reuse": after.since(mid).kv_regret_tokens,
        }
        print(name, record["prefix"][name], flush=True)

    # 3. engine_decode
    record["decode"] = {}
    for batch in (1, 32):
        if time.perf_counter() > deadline - 60:
            break
        requests = [GenerateRequest(p, 128) for p in prompts_shared(rng, batch, vocab)]
        engine.generate(requests[:1], speculative=False)
        results = {}
        plain, plain_s = timed(lambda: engine.generate(requests, speculative=False))
        truths = {r.prompt_ids: g.token_ids for r, g in zip(requests, plain)}
        tokens = sum(len(g.token_ids) for g in plain)
        results["greedy_tokens_per_s"] = round(tokens / plain_s, 1)
        lookup, lookup_s = timed(lambda: engine.generate(requests))
        results["ngram_tokens_per_s"] = round(tokens / lookup_s, 1)
        results["ngram_identical"] = [g.token_ids for g in lookup] == [g.token_ids for g in plain]
        default_drafter = engine.drafter
        engine.drafter = lambda prompt: _Oracle(prompt, truths)
        before = engine.stats.copy()
        oracle, oracle_s = timed(lambda: engine.generate(requests))
        delta = engine.stats.since(before)
        engine.drafter = default_drafter
        results["oracle_tokens_per_s"] = round(tokens / oracle_s, 1)
        results["oracle_identical"] = [g.token_ids for g in oracle] == [g.token_ids for g in plain]
        results["oracle_tokens_per_pass_per_row"] = round(delta.generated_tokens / max(1, delta.decode_passes) / batch, 2)
        record["decode"][f"batch_{batch}"] = results
        print(f"decode batch {batch}", results, flush=True)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "engine_gpu.json").write_text(json.dumps(record, indent=2) + "\n")
    print("wrote", out / "engine_gpu.json")


class _Oracle:
    def __init__(self, prompt, truths):
        self.n, self.truth, self.tokens = len(prompt), truths[tuple(prompt)], list(prompt)

    def extend(self, tokens):
        self.tokens.extend(tokens)

    def propose(self, limit):
        done = len(self.tokens) - self.n
        return list(self.truth[done : done + min(limit, 8)])

    def feedback(self, proposed, accepted):
        pass


if __name__ == "__main__":
    main()
