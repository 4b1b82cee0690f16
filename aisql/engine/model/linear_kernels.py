"""Which matrix-multiply kernel the CPU engine's linear layers run on, chosen by measurement.

PyTorch's `F.linear` in float32 on x86 goes to MKL's sgemm, which on some CPUs (the AMD EPYC
these benchmarks run on) takes a path at half the machine's vector width: 95-105 GFLOPS on one
core here, where oneDNN with the weights reordered once into its blocked layout reaches 210-240
(the same oneDNN path torch.compile's CPU freezing pass, IPEX and vLLM's CPU backend use). Which
is faster depends on the CPU, the dtype and the torch build, so it is measured, not assumed: once
per CPU kind, dtype and torch version, on the model's own layer shapes, and remembered in
`cache_root()/kernels/`. The packed op is exact float arithmetic like `F.linear` (a different
summation order: float noise, and batch-invariant — a row's output does not depend on the rows
beside it), so planned == naive holds on either kernel.

`AISQL_LINEAR_KERNEL=default|onednn` overrides the measurement (benchmarks compare the two). The
output head is left alone: the engine scores only the labels' rows of it
(aisql.engine.batch.model_runner).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

KERNELS = ("default", "onednn")
DECISION_VERSION = 2  # 2: measured at few and many rows, one and all threads (1: one thread, 256 rows)
MIN_SPEEDUP = 1.1  # below this the measurement is noise on a shared machine: keep PyTorch's default
_OVERRIDE = "AISQL_LINEAR_KERNEL"


@dataclass(frozen=True)
class KernelChoice:
    kernel: str  # "default" | "onednn"
    speedup: float | None  # packed over default on the model's shapes; None: not measured (override, unsupported)
    reason: str

    def describe(self) -> str | None:
        """What outputs say beside the numerics (nothing for PyTorch's default)."""
        return "oneDNN linear" if self.kernel == "onednn" else None


def onednn_available() -> bool:
    import torch

    return bool(torch.backends.mkldnn.is_available()) and hasattr(torch.ops.mkldnn, "_linear_pointwise")


class PackedLinear:
    """Stand-in for an `nn.Linear` at inference: the weight reordered once for oneDNN."""

    @staticmethod
    def build(linear):
        import torch
        from torch import nn

        class _Packed(nn.Module):
            def __init__(self, source: nn.Linear) -> None:
                super().__init__()
                self.in_features, self.out_features = source.in_features, source.out_features
                # the weights it multiplies, as parameters counted them (buffers are not parameters:
                # aisql.engine.model.profile adds these, or a packed model's FLOPs drop to its norms')
                self.replaced_parameters = source.weight.numel() + (source.bias.numel() if source.bias is not None else 0)
                weight = source.weight.detach()
                self.register_buffer("packed_weight", torch.ops.mkldnn._reorder_linear_weight(weight, 256), persistent=False)
                bias = source.bias.detach() if source.bias is not None else None
                self.register_buffer("bias", bias, persistent=False)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, "none", [], "")

            def extra_repr(self) -> str:
                return f"in_features={self.in_features}, out_features={self.out_features}, kernel=onednn"

        return _Packed(linear)


def pack_linears(model) -> int:
    """Replace the decoder's `nn.Linear` layers (not the output head) by oneDNN-packed ones;
    returns how many were replaced."""
    from torch import nn

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear and child is not head and child.weight.device.type == "cpu":
                setattr(parent, name, PackedLinear.build(child))
                replaced += 1
    return replaced


def _layer_shapes(model) -> list[tuple[int, int]]:
    """(in, out) of the decoder's distinct linear shapes, largest first (at most three)."""
    from torch import nn

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    shapes = {(m.in_features, m.out_features) for m in model.modules() if type(m) is nn.Linear and m is not head}
    return sorted(shapes, key=lambda s: -s[0] * s[1])[:3]


MEASURED_ROWS = (16, 256)  # a decode step's or a short pass's rows, and a prompt batch's


def measure_speedup(shapes: list[tuple[int, int]], dtype, repeats: int = 5) -> float:
    """How much faster the packed op is than `F.linear` on these shapes: the geometric mean over
    few and many rows (MEASURED_ROWS) at one thread (CPU seconds: a core's speed) and at the threads
    the engine has (wall seconds: how the kernel's work divides between them). Both matter: on an
    AMD EPYC here (tiny-32k's shapes) the packed op measured 1.04-1.09x at one thread, but
    1.17-1.19x at two threads and 256 rows and 1.34-1.53x at two threads and 16 rows, where MKL's
    small-matrix path does not split the work (benchmarks/RESULTS.md §33)."""
    import math

    import torch

    threads = torch.get_num_threads()
    settings = [(1, rows) for rows in MEASURED_ROWS] + ([(threads, rows) for rows in MEASURED_ROWS] if threads > 1 else [])
    ratios = []
    try:
        for setting_threads, rows in settings:
            torch.set_num_threads(setting_threads)
            clock = time.process_time if setting_threads == 1 else time.perf_counter
            ratios.append(_ratio(shapes, dtype, rows, repeats, clock))
    finally:
        torch.set_num_threads(threads)
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else 1.0


def _ratio(shapes: list[tuple[int, int]], dtype, rows: int, repeats: int, clock) -> float:
    """Seconds of `F.linear` over the packed op's at this many rows (best of `repeats`, each
    timing enough calls to be measurable)."""
    import torch

    def best(call, x, calls: int) -> float:
        call(x)
        times = []
        for _ in range(repeats):
            started = clock()
            for _ in range(calls):
                call(x)
            times.append(clock() - started)
        return min(times)

    default = packed = 0.0
    with torch.inference_mode():
        for in_features, out_features in shapes:
            calls = max(1, (1 << 27) // (rows * in_features * out_features))  # ~0.1 GFLOP per timing
            x = torch.randn(rows, in_features).to(dtype)
            weight = (torch.randn(out_features, in_features) * 0.02).to(dtype)
            reordered = torch.ops.mkldnn._reorder_linear_weight(weight, rows)
            default += best(lambda v: torch.nn.functional.linear(v, weight), x, calls)
            packed += best(lambda v: torch.ops.mkldnn._linear_pointwise(v, reordered, None, "none", [], ""), x, calls)
    return default / packed if packed > 0 else 1.0


def choose(model, dtype_name: str) -> KernelChoice:
    """The kernel for this model's linear layers on this CPU (measured once, remembered)."""
    import torch

    forced = os.environ.get(_OVERRIDE, "").strip().lower()
    if forced:
        if forced not in KERNELS:
            from aisql.errors import ModelError

            raise ModelError(f"{_OVERRIDE}={forced!r}: expected one of {', '.join(KERNELS)}")
        if forced == "onednn" and not onednn_available():
            return KernelChoice("default", None, "oneDNN is not in this torch build")
        return KernelChoice(forced, None, f"{_OVERRIDE}={forced}")
    if dtype_name not in ("float32", "bfloat16") or not onednn_available():
        return KernelChoice("default", None, f"no packed oneDNN linear for {dtype_name} in this build")
    shapes = _layer_shapes(model)
    if not shapes:
        return KernelChoice("default", None, "no linear layers")
    path = _decision_path(dtype_name, shapes)
    try:
        remembered = json.loads(path.read_text())
        return KernelChoice(remembered["kernel"], remembered["speedup"], remembered["reason"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        speedup = round(measure_speedup(shapes, getattr(torch, dtype_name)), 2)
    except RuntimeError as err:  # oneDNN has no packed kernel for this dtype on this CPU (bf16 without AVX-512)
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        return KernelChoice("default", None, f"no packed oneDNN linear for {dtype_name} on this CPU ({first})")
    kernel = "onednn" if speedup >= MIN_SPEEDUP else "default"
    choice = KernelChoice(kernel, speedup, f"packed oneDNN {speedup}x as fast as F.linear on shapes {shapes} (rows {MEASURED_ROWS}, 1 and {torch.get_num_threads()} threads)")
    _remember(path, choice)
    return choice


def _decision_path(dtype_name: str, shapes: list[tuple[int, int]]):
    import torch

    from aisql.engine.model.auto_numerics import cpu_kind
    from aisql.paths import cache_root

    kind = cpu_kind()
    shape_key = "_".join(f"{i}x{o}" for i, o in shapes)
    version = torch.__version__.replace("+", "-")
    return cache_root() / "kernels" / f"cpu-{kind.key}-{dtype_name}-{shape_key}-torch{version}-v{DECISION_VERSION}.json"


def _remember(path, choice: KernelChoice) -> None:
    from aisql.paths import save_cache_file

    # best effort: a read-only cache directory only means measuring again next time
    save_cache_file(path, json.dumps({"kernel": choice.kernel, "speedup": choice.speedup, "reason": choice.reason}))


def apply(model, dtype_name: str) -> KernelChoice:
    """Choose the kernel and pack the model's linears when it is oneDNN."""
    choice = choose(model, dtype_name)
    if choice.kernel == "onednn":
        pack_linears(model)
    return choice
