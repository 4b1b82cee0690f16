"""Opt-in weight quantization. Never on by default; every output of a quantized model says so.

- int8 (CPU): the decoder's linear layers become dynamically quantized int8 matmuls (weights int8,
  activations quantized per batch) — faster and 4x smaller weights on x86 CPUs.
- fp8 (any device): weight-only float8 (e4m3) with one scale per output channel, dequantized on the
  fly; halves weight memory against bf16, the win on memory-bound GPU decoding.
- bf16: weights in bfloat16 (the default on CUDA already; on most CPUs slower than float32).

The output head stays in full precision: scoring reads its label rows directly.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import nn

from aisql.engine.model.numerics import QUANTIZATIONS, quantization_note
from aisql.errors import ModelError



@dataclass(frozen=True)
class Quantization:
    method: str
    note: str


def quantize_model(model, method: str, device) -> Quantization:
    method = method.lower()
    decoder = model.get_decoder()
    if method == "int8":
        if device.type != "cpu":
            raise ModelError("--quantize int8 runs on the CPU (dynamic int8 matmuls); on CUDA use fp8 or bf16")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.ao.quantization announces its successor
            per_channel = {nn.Linear: torch.ao.quantization.per_channel_dynamic_qconfig}
            torch.ao.quantization.quantize_dynamic(decoder, per_channel, dtype=torch.qint8, inplace=True)
    elif method == "fp8":
        if not hasattr(torch, "float8_e4m3fn"):
            raise ModelError("--quantize fp8 needs a torch build with float8 types")
        _replace_linears(decoder, FP8WeightLinear.from_linear)
    elif method == "bf16":
        decoder.to(torch.bfloat16)
    else:
        raise ModelError(f"unknown quantization {method!r}", hint=f"use one of: {', '.join(QUANTIZATIONS)}")
    return Quantization(method, quantization_note(method))


class FP8WeightLinear(nn.Module):
    """Linear layer whose weight is stored in float8 e4m3 with a per-output-channel scale."""

    def __init__(self, weight_fp8: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("weight_fp8", weight_fp8)
        self.register_buffer("scale", scale)
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)
        self.compute_dtype = dtype
        self.in_features = weight_fp8.shape[1]
        self.out_features = weight_fp8.shape[0]

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "FP8WeightLinear":
        weight = linear.weight.detach().float()
        max_value = torch.finfo(torch.float8_e4m3fn).max
        scale = weight.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / max_value
        weight_fp8 = (weight / scale).to(torch.float8_e4m3fn)
        bias = None if linear.bias is None else linear.bias.detach().clone()
        return cls(weight_fp8, scale.to(linear.weight.dtype), bias, linear.weight.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight_fp8.to(x.dtype) * self.scale.to(x.dtype)
        return nn.functional.linear(x, weight, self.bias)


def _replace_linears(module: nn.Module, make) -> None:
    for name, child in module.named_children():
        if isinstance(child, nn.Linear):
            setattr(module, name, make(child))
        else:
            _replace_linears(child, make)
