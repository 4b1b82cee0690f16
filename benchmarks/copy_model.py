"""A small model that has learned to copy, for the speculative-decoding benchmark.

Random weights never copy from their input, so prompt-lookup drafts would never be accepted and
the benchmark would measure nothing. This trains a 2-layer Llama (hidden 128, vocabulary 512) on
CPU in about five minutes: half the batches are random sequences repeated once (where induction
heads — find the previous occurrence of the current tokens, copy what followed — form), half are
the task itself: a record of fields separated by a delimiter, then the first two tokens of one
field, to be completed with the rest of that field and an end token. The result is cached under
the aisql cache dir like the tiny model, keyed by this file's training settings.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

import torch

from aisql.engine.model.tiny import TinyConfig, tiny_model_dir
from aisql.paths import cache_root

VOCAB = 512
FIRST_VALUE = 10  # ids below are control tokens
EOS = 2  # the tiny tokenizer's <|im_end|>, which the engine stops on
DELIMITER = 3
SEPARATOR = 4
SETTINGS = dict(hidden=128, intermediate=256, layers=2, heads=4, steps=2000, batch=32, lr=1e-3, seed=0, version=2)


def field_task(rng: random.Random, fields: int, low: int, high: int) -> tuple[list[int], list[int]]:
    """(prompt, expected answer): a record of `fields` fields, then the first two tokens of one."""
    values = [[rng.randrange(FIRST_VALUE, VOCAB) for _ in range(rng.randint(low, high))] for _ in range(fields)]
    chosen = rng.choice(values)
    record = [t for value in values for t in value + [DELIMITER]]
    return [1] + record + [SEPARATOR] + chosen[:2], chosen[2:] + [EOS]


def copy_model_dir() -> Path:
    key = hashlib.sha256(json.dumps(SETTINGS, sort_keys=True).encode()).hexdigest()[:12]
    target = cache_root() / "models" / f"copy-{key}"
    if (target / "config.json").exists():
        return target
    staging = Path(tempfile.mkdtemp(prefix=".copy-", dir=target.parent if target.parent.exists() else None))
    try:
        _train(staging)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _train(directory: Path) -> None:
    import transformers
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    transformers.utils.logging.disable_progress_bar()
    s = SETTINGS
    rng = random.Random(s["seed"])
    torch.manual_seed(s["seed"])
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=s["hidden"],
        intermediate_size=s["intermediate"],
        num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"],
        num_key_value_heads=s["heads"],
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        eos_token_id=EOS,
        pad_token_id=0,
        bos_token_id=None,
    )
    model = LlamaForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=s["lr"], weight_decay=0.0)
    started = time.perf_counter()
    for step in range(1, s["steps"] + 1):
        examples = []
        for i in range(s["batch"]):
            if i % 2 == 0:
                seq = [rng.randrange(FIRST_VALUE, VOCAB) for _ in range(rng.randint(12, 64))]
                examples.append(([1] + seq, seq))
            else:
                examples.append(field_task(rng, rng.randint(3, 5), 8, 48))
        width = max(len(p) + len(a) for p, a in examples)
        ids = torch.zeros((len(examples), width), dtype=torch.long)
        labels = torch.full((len(examples), width), -100)
        for b, (prompt, answer) in enumerate(examples):
            full = prompt + answer
            ids[b, : len(full)] = torch.tensor(full)
            labels[b, len(prompt) : len(full)] = torch.tensor(answer)
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        if step % 250 == 0:
            print(f"  copy model: step {step}/{s['steps']} loss {loss.item():.3f} ({time.perf_counter() - started:.0f} s)", flush=True)
    model.generation_config = GenerationConfig(eos_token_id=EOS, pad_token_id=0)
    model.save_pretrained(directory)
    AutoTokenizer.from_pretrained(tiny_model_dir(TinyConfig())).save_pretrained(directory)


if __name__ == "__main__":
    print(copy_model_dir())
