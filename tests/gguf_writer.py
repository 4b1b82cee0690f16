"""Write the tiny test model as a GGUF file (llama.cpp's format), with the `gguf` package: the
layout llama.cpp's converter writes for a Llama model with a byte-level BPE tokenizer. Lets the
GGUF path be tested on a small file instead of the 98 MB real model."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
from safetensors.numpy import load_file


def _permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """HF's query/key rows to llama.cpp's rotary layout (transformers undoes this when reading)."""
    return weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)


def write_tiny_gguf(directory: Path, out: Path, architecture: str = "llama") -> Path:
    config = json.loads((directory / "config.json").read_text())
    weights = {k: v.astype(np.float32) for k, v in load_file(str(directory / "model.safetensors")).items()}
    tokenizer = json.loads((directory / "tokenizer.json").read_text())
    tokenizer_config = json.loads((directory / "tokenizer_config.json").read_text())
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]

    writer = gguf.GGUFWriter(str(out), architecture)
    writer.add_name("aisql tiny")
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(float(config.get("rope_theta") or config.get("rope_parameters", {}).get("rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    writer.add_rope_dimension_count(config["hidden_size"] // heads)
    writer.add_vocab_size(config["vocab_size"])

    vocab = tokenizer["model"]["vocab"]
    specials = {t["id"]: t["content"] for t in tokenizer["added_tokens"]}
    tokens = [""] * config["vocab_size"]
    for text, index in vocab.items():
        tokens[index] = text
    for index, text in specials.items():
        tokens[index] = text
    types = [gguf.TokenType.CONTROL if i in specials else gguf.TokenType.NORMAL for i in range(len(tokens))]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tokenizer["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_eos_token_id(config["eos_token_id"])
    writer.add_pad_token_id(config["pad_token_id"])
    writer.add_add_bos_token(False)
    template = (directory / "chat_template.jinja").read_text() if (directory / "chat_template.jinja").exists() else tokenizer_config.get("chat_template")
    writer.add_chat_template(template)

    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}
    per_layer = {
        "input_layernorm.weight": "attn_norm.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }
    for name, tensor in weights.items():
        if name in names:
            writer.add_tensor(names[name], tensor)
            continue
        _, _, layer, rest = name.split(".", 3)
        if rest == "self_attn.q_proj.weight":
            tensor = _permute(tensor, heads)
        elif rest == "self_attn.k_proj.weight":
            tensor = _permute(tensor, kv_heads)
        writer.add_tensor(f"blk.{layer}.{per_layer[rest]}", tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out
