"""A model's shape for the cost model, from an instantiated model or from its config alone."""

from __future__ import annotations

from aisql.engine.base import ModelProfile


def model_profile(model, name: str) -> ModelProfile:
    """Size and shape of a transformers model (real weights, or built on the meta device)."""
    config = model.config
    decoder = model.get_decoder()
    params = sum(p.numel() for n, p in decoder.named_parameters() if "embed" not in n) + _packed(decoder)
    layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", 1)
    heads = getattr(config, "num_attention_heads", None) or getattr(config, "n_head", 1)
    hidden = getattr(config, "hidden_size", None) or getattr(config, "n_embd", 0)
    head_dim = getattr(config, "head_dim", None) or hidden // max(1, heads)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    first = next(model.parameters())
    dtype_bytes = first.element_size()
    total = sum(p.numel() for p in model.parameters()) + _packed(model)
    return ModelProfile(
        name=name,
        params=params,
        layers=layers,
        attention_width=heads * head_dim,
        kv_bytes_per_token=2 * layers * kv_heads * head_dim * dtype_bytes,
        weight_bytes=total * dtype_bytes,
        max_context=int(getattr(config, "max_position_embeddings", 0) or 0),
    )


def _packed(module) -> int:
    """Weights held by kernel stand-ins (aisql.engine.model.linear_kernels) as buffers, not parameters."""
    return sum(getattr(m, "replaced_parameters", 0) for m in module.modules())


def profile_from_config(directory, name: str, dtype) -> ModelProfile:
    """The profile without loading weights: the model built on the meta device."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(directory)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model_profile(model, name)
