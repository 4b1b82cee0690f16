"""Device, dtype and quantization names — decided without importing torch where possible.

A run whose answers are all in the result cache must not pay for importing torch (seconds), yet
the cache key names the device type and dtype the answers were computed with. `auto` resolves to
the CPU without torch when the machine has no GPU device files (no NVIDIA or AMD driver nodes):
then torch could not find a GPU either. Only where such files exist is torch asked.
"""

from __future__ import annotations

import glob
import os
import re

from aisql.errors import ModelError

QUANTIZATIONS = ("int8", "fp8", "bf16")
DTYPES = ("float32", "bfloat16", "float16", "float64")
_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")
_GPU_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")


def check_device(requested: str) -> str:
    """`auto`, `cpu`, `cuda` or `cuda:N`; anything else is a clear error."""
    if requested != "auto" and not _DEVICE.match(requested):
        raise ModelError(f"unknown device {requested!r}", hint="use auto, cpu, cuda or cuda:N")
    return requested


def gpu_possible() -> bool:
    """Could torch see a GPU here? False for certain when no GPU driver device node exists."""
    return any(glob.glob(pattern) for pattern in _GPU_NODES)


def cuda_available() -> bool:
    if not gpu_possible():
        return False
    import torch

    return torch.cuda.is_available()


def device_type(requested: str) -> str:
    """'cpu' or 'cuda' for a device option, importing torch only when a GPU may be present."""
    requested = check_device(requested)
    if requested == "auto":
        return "cuda" if cuda_available() else "cpu"
    if requested.startswith("cuda") and not cuda_available():
        raise ModelError("--device cuda was requested but no CUDA device is available")
    return requested.split(":")[0]


def dtype_name(requested: str, device: str) -> str:
    """The compute dtype's name: `auto` is float32 on CPU, bfloat16 on CUDA (float16 without bf16)."""
    if requested == "auto":
        if device == "cpu":
            return "float32"
        import torch

        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    if requested not in DTYPES:
        raise ModelError(f"unknown dtype {requested!r}", hint="use float32, bfloat16, float16 or float64")
    return requested


def quantization_note(method: str) -> str:
    """What every output made with quantized weights says (answers cached from them included)."""
    return f"weights quantized to {method} (opt-in): answers may differ from full precision"


def available_host_memory() -> int:
    """Bytes of memory free for new allocations (MemAvailable), or a guess where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 4 << 30
