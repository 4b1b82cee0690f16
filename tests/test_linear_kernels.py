"""The CPU engine's linear kernel (aisql.engine.model.linear_kernels): oneDNN-packed weights give
PyTorch's answers to float noise, batch-invariantly; the choice is measured once and remembered,
and can be forced."""

from __future__ import annotations

import json

import pytest
import torch

from aisql.engine import EngineOptions, load_engine
from aisql.engine.model import linear_kernels
from aisql.errors import ModelError

pytestmark = pytest.mark.skipif(not linear_kernels.onednn_available(), reason="this torch build has no oneDNN")


def test_packed_linears_compute_what_nn_linear_computes_and_leave_the_head_alone():
    layer = torch.nn.Linear(64, 96)
    packed = linear_kernels.PackedLinear.build(layer)
    x = torch.randn(2, 7, 64)
    with torch.inference_mode():
        assert torch.allclose(packed(x), layer(x), atol=1e-5)
        # batch-invariant: a row alone gives exactly what it gives beside others
        assert torch.equal(packed(x[:1, :1])[0, 0], packed(x)[0, 0])
    model = torch.nn.Module()
    model.body = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8))
    model.head = torch.nn.Linear(8, 100)
    model.get_output_embeddings = lambda: model.head
    assert linear_kernels.pack_linears(model) == 2
    assert type(model.head) is torch.nn.Linear and type(model.body[0]) is not torch.nn.Linear


def test_the_choice_is_forced_by_the_environment_and_a_bad_value_is_named(monkeypatch):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8))
    monkeypatch.setenv("AISQL_LINEAR_KERNEL", "default")
    assert linear_kernels.choose(model, "float32").kernel == "default"
    monkeypatch.setenv("AISQL_LINEAR_KERNEL", "onednn")
    assert linear_kernels.choose(model, "float32").describe() == "oneDNN linear"
    monkeypatch.setenv("AISQL_LINEAR_KERNEL", "fastest")
    with pytest.raises(ModelError, match="AISQL_LINEAR_KERNEL='fastest'"):
        linear_kernels.choose(model, "float32")


def test_the_measurement_is_made_once_per_cpu_dtype_and_shape(monkeypatch, tmp_path):
    monkeypatch.setenv("AISQL_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("AISQL_LINEAR_KERNEL", raising=False)
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.Linear(48, 32))
    measured = []
    monkeypatch.setattr(linear_kernels, "measure_speedup", lambda shapes, dtype: measured.append(shapes) or 3.0)
    first = linear_kernels.choose(model, "float32")
    assert (first.kernel, first.speedup) == ("onednn", 3.0) and len(measured) == 1
    assert linear_kernels.choose(model, "float32") == first and len(measured) == 1  # remembered
    [saved] = (tmp_path / "kernels").iterdir()
    assert json.loads(saved.read_text())["kernel"] == "onednn"
    monkeypatch.setattr(linear_kernels, "measure_speedup", lambda shapes, dtype: 1.02)
    assert linear_kernels.choose(model, "bfloat16").kernel == "default"  # under MIN_SPEEDUP: noise, PyTorch's kernel
    assert linear_kernels.choose(model, "float16").kernel == "default"  # not measured: no packed path for it


def test_a_cpu_without_the_packed_kernel_keeps_pytorchs(monkeypatch, tmp_path):
    """oneDNN refuses bf16 packing on a CPU without AVX-512 (a Zen 3): the default kernel, not a crash."""
    monkeypatch.setenv("AISQL_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("AISQL_LINEAR_KERNEL", raising=False)

    def refuse(shapes, dtype):
        raise RuntimeError("mkldnn_reorder_linear_weight: bf16 path needs the cpu support avx_ne_convert or avx512bw")

    monkeypatch.setattr(linear_kernels, "measure_speedup", refuse)
    choice = linear_kernels.choose(torch.nn.Sequential(torch.nn.Linear(32, 48)), "bfloat16")
    assert choice.kernel == "default" and "avx512bw" in choice.reason


def test_an_engine_on_either_kernel_gives_the_same_answers(monkeypatch):
    from aisql.engine import ScoreRequest

    scores = {}
    for kernel in ("default", "onednn"):
        monkeypatch.setenv("AISQL_LINEAR_KERNEL", kernel)
        engine = load_engine("tiny", EngineOptions())
        assert engine.info.kernels == ("oneDNN linear" if kernel == "onednn" else None)
        labels = (engine.encode_label("TRUE"), engine.encode_label("FALSE"))
        prompts = engine.encode_prompts("Answer.", [f"Customer {i} likes product {i * 3}." for i in range(12)])
        scores[kernel] = engine.score([ScoreRequest(tuple(p), labels) for p in prompts])
    for a, b in zip(scores["default"], scores["onednn"]):
        assert a.best == b.best
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-4


def test_a_packed_model_keeps_its_size_and_flops():
    """Packed weights are buffers, not parameters: the engine's profile (FLOPs, explain's
    estimates) once counted a packed Qwen-0.5B as 43,904 decoder weights — its norms."""
    from transformers import AutoModelForCausalLM

    from aisql.engine.model.profile import model_profile
    from aisql.engine.model.tiny import tiny_model_dir

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir())
    before = model_profile(model, "tiny")
    assert linear_kernels.pack_linears(model) > 0
    assert model_profile(model, "tiny") == before
