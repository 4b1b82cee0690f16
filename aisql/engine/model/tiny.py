"""The offline test model: a seeded, randomly initialised Llama with a tokenizer trained here.

Model hubs are not always reachable (CI, air-gapped machines), yet every code path — tokenizer,
chat template, batched forward passes, KV cache — must run against a real transformers model.
`--model tiny` builds one in a few seconds from text the project ships, saves it like any HF
checkpoint under the user cache dir, and loads it through the same code as a downloaded model.
Its answers are deterministic and meaningless; every output that used it says so.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from aisql.paths import build_directory_once, cache_root

TINY_VERSION = 1
CORPUS = Path(__file__).with_name("tiny_corpus.txt")
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
NOTE = "tiny test model with random weights: answers are meaningless"


@dataclass(frozen=True)
class TinyConfig:
    vocab_size: int = 4096  # the trained tokenizer may come out smaller; the model matches it
    hidden_size: int = 64
    intermediate_size: int = 192
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 8192
    # Wider than HF's 0.02 so that answers vary from prompt to prompt instead of all agreeing.
    initializer_range: float = 0.5
    seed: int = 0
    # A model vocabulary larger than the trained tokenizer's (benchmarks of realistic output-head
    # sizes feed token ids directly); None: the tokenizer's size.
    model_vocab_size: int | None = None

    def key(self) -> str:
        payload = json.dumps({"v": TINY_VERSION, "config": asdict(self)}, sort_keys=True).encode()
        digest = hashlib.sha256(payload + CORPUS.read_bytes()).hexdigest()
        return digest[:16]


def tiny_model_dir(config: TinyConfig = TinyConfig()) -> Path:
    """Directory of the tiny model for `config`, building it on first use (atomically)."""
    target = cache_root() / "models" / f"tiny-{config.key()}"
    if (target / "config.json").exists():
        return target
    _refuse_a_full_disk(target.parent, config)
    import transformers

    transformers.utils.logging.disable_progress_bar()
    return build_directory_once(target, lambda staging: build_tiny_model(staging, config), "build the tiny model")


def _refuse_a_full_disk(directory: Path, config: TinyConfig) -> None:
    """The build writes float32 weights and a tokenizer (1.7 MB for the default config): checked
    first, so a full disk is one line, not a serializer's error half way."""
    from aisql.engine.model.gguf import free_disk_bytes
    from aisql.errors import ModelError

    vocab = config.model_vocab_size or config.vocab_size
    per_layer = 4 * config.hidden_size**2 + 3 * config.hidden_size * config.intermediate_size
    need = 4 * (2 * vocab * config.hidden_size + config.num_hidden_layers * per_layer) + 4 * 2**20
    free = free_disk_bytes(directory)
    if need > free:
        raise ModelError(
            f"cannot build the tiny model in {directory}: it needs about {need / 2**20:.0f} MB of disk, {free / 2**20:.1f} MB are free",
            hint="free disk space, or set AISQL_CACHE_DIR to a disk with room",
        )


def build_tiny_model(directory: Path, config: TinyConfig = TinyConfig()) -> None:
    """Train the tokenizer and save a seeded random Llama (+ tokenizer) into `directory`."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=config.vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS.read_text(encoding="utf-8").splitlines(), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=config.max_position_embeddings,
    )
    fast.chat_template = CHAT_TEMPLATE

    model_config = LlamaConfig(
        vocab_size=max(tokenizer.get_vocab_size(), config.model_vocab_size or 0),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads,
        max_position_embeddings=config.max_position_embeddings,
        initializer_range=config.initializer_range,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=fast.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=fast.convert_tokens_to_ids("<|endoftext|>"),
    )
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(config.seed)
        model = LlamaForCausalLM(model_config)
    finally:
        torch.random.set_rng_state(generator_state)
    model.generation_config = GenerationConfig(
        eos_token_id=model_config.eos_token_id, pad_token_id=model_config.pad_token_id
    )
    model.save_pretrained(directory)
    fast.save_pretrained(directory)
    (directory / "AISQL_TINY.json").write_text(json.dumps({"note": NOTE, "config": asdict(config)}, indent=2))
