"""What planning needs of a GGUF model, read from the file's header: nothing converted.

`aisql explain` is the command a user runs before paying; on a GGUF model never run here it once
converted the whole file into a model directory first (Qwen2.5-Coder-0.5B: 119 s and ~5 GB of
memory at the peak) only to read its tokenizer and shape. Both are in the header:

- the tokenizer: the vocabulary and merges transformers' own GGUF tokenizer builder reads (the
  same builder the conversion runs, so prompts encode to the same ids), with the file's chat
  template and special tokens;
- the shape (aisql.engine.base.ModelProfile): layer, head and width counts from the metadata,
  parameter counts from the tensor table's shapes — no tensor data is read.

Once the model has been converted (its first run), the converted directory answers instead.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import struct
from contextlib import contextmanager
from math import prod
from pathlib import Path

from aisql.engine.base import ModelFacts, ModelProfile
from aisql.engine.model.model_files import loader_failure
from aisql.errors import ModelError
from aisql.paths import cache_root, save_cache_file

_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def gguf_model_facts(path: Path, name: str, dtype: str) -> ModelFacts:
    """Prompt format and shape of the GGUF model at `path`, computed in `dtype`, from its header."""
    from aisql.engine.model.prompt_format import EncodesPrompts, PromptFormat

    encoder = EncodesPrompts()
    encoder.format = PromptFormat(gguf_tokenizer(path, name))
    return ModelFacts(format=encoder.format, profile=gguf_profile(path, name, dtype), encode_label=encoder.encode_label)


def gguf_tokenizer(path: Path, name: str):
    """The file's tokenizer as transformers builds it from a GGUF (what the conversion saves),
    kept in the cache dir once built (keyed like the profile: a second explain loads it in ~1 s).

    The vocabulary and merges are read by `read_tokenizer_metadata` (a tight loop over the mmap:
    ~0.3 s for Qwen's 151k tokens and 151k merges, where transformers' reader takes ~6 s), then
    grouped and built exactly as transformers' `get_gguf_tokenizer` / `convert_gguf_tokenizer` do."""
    import transformers
    from transformers import PreTrainedTokenizerFast

    transformers.utils.logging.set_verbosity_error()
    memo = _tokenizer_path(path)
    if (memo / "tokenizer.json").exists():
        try:
            return PreTrainedTokenizerFast.from_pretrained(str(memo))
        except Exception:  # a damaged memo: build it again
            pass
    try:
        from transformers.integrations.gguf import convert_gguf_tokenizer

        architecture, tokenizer_dict, config = _tokenizer_parts(read_tokenizer_metadata(path))
        backend, extra = convert_gguf_tokenizer(architecture, tokenizer_dict)
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, **{**config, **extra})
    except ModelError:
        raise
    except Exception as err:  # an architecture or vocabulary type transformers cannot build here
        raise loader_failure(f"the tokenizer of {name}", path, err) from None
    _save_tokenizer(tokenizer, memo)
    return tokenizer


def _tokenizer_parts(metadata: dict) -> tuple[str, dict, dict]:
    """(architecture, tokenizer dict, tokenizer config) from the metadata, grouped as
    transformers' `get_gguf_tokenizer` groups them (its own mapping tables)."""
    from transformers.integrations.gguf.gguf_tokenizer_mapping import _SPECIAL_TOKENS, GGUF_TOKENIZER_MAPPING

    grouped = {
        group: {name: metadata[f"tokenizer.{key}"] for key, name in renames.items() if f"tokenizer.{key}" in metadata}
        for group, renames in GGUF_TOKENIZER_MAPPING.items()
    }
    tokenizer, config = grouped["tokenizer"], grouped["tokenizer_config"]
    kind = tokenizer.get("tokenizer_type")
    if kind == "llama":
        config.setdefault("add_bos_token", True)
    elif kind == "gemma4":
        config["add_bos_token"] = False
    for name, key in _SPECIAL_TOKENS.items():
        token_id = metadata.get(f"tokenizer.ggml.{key}")
        config[name] = tokenizer["tokens"][token_id] if token_id is not None else None
    return metadata["general.architecture"], tokenizer, config


def _tokenizer_path(path: Path) -> Path:
    return _profile_path(path, "tokenizer").with_suffix("")


def _save_tokenizer(tokenizer, memo: Path) -> None:
    """Saved whole or not at all (a temporary directory renamed), so a reader never sees half."""
    import shutil
    import tempfile

    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=memo.parent, prefix=".building-"))
        tokenizer.save_pretrained(str(staging))
        try:
            staging.rename(memo)
        except OSError:  # another process saved it first
            shutil.rmtree(staging, ignore_errors=True)
    except OSError:
        pass  # an unwritable cache: the next explain builds it again


def gguf_profile(path: Path, name: str, dtype: str) -> ModelProfile:
    """The model's shape from the header's metadata and tensor table (kept in the cache dir by
    the file's size, mtime and header bytes, so a second explain reads a small JSON file)."""
    memo = _profile_path(path, dtype)
    try:
        return ModelProfile(**{**json.loads(memo.read_text()), "name": name})
    except (OSError, ValueError, TypeError):
        pass
    try:
        metadata, shapes = read_header(path)
    except (OSError, ValueError, KeyError, struct.error) as err:  # not a GGUF file, a truncated one
        raise ModelError(f"{path.name} is not a readable GGUF file ({type(err).__name__}: {err})") from None
    profile = profile_from_header(metadata, shapes, name, dtype)
    save_cache_file(memo, json.dumps(profile.__dict__))
    return profile


def profile_from_header(metadata: dict, shapes: dict[str, tuple[int, ...]], name: str, dtype: str) -> ModelProfile:
    """ModelProfile from GGUF metadata (`{arch}.block_count`, `.attention.head_count`, ...) and
    tensor shapes: decoder parameters are the blocks' and the final norm's (no embeddings, no
    output head), as aisql.engine.model.profile counts them on a loaded model."""
    arch = metadata["general.architecture"]
    layers = int(metadata[f"{arch}.block_count"])
    hidden = int(metadata[f"{arch}.embedding_length"])
    heads = int(metadata.get(f"{arch}.attention.head_count", 1))
    kv_heads = int(metadata.get(f"{arch}.attention.head_count_kv", heads))
    head_dim = int(metadata.get(f"{arch}.attention.key_length", hidden // max(1, heads)))
    size = _DTYPE_BYTES.get(dtype, 4)
    decoder = sum(prod(shape) for tensor, shape in shapes.items() if tensor.startswith("blk.") or tensor == "output_norm.weight")
    return ModelProfile(
        name=name,
        params=int(decoder),
        layers=layers,
        attention_width=heads * head_dim,
        kv_bytes_per_token=2 * layers * kv_heads * head_dim * size,
        weight_bytes=int(sum(prod(shape) for shape in shapes.values())) * size,
        max_context=int(metadata.get(f"{arch}.context_length", 0) or 0),
    )


def _profile_path(path: Path, dtype: str) -> Path:
    stat = path.stat()
    with path.open("rb") as f:
        head = f.read(1 << 16)
    key = hashlib.sha256(head + f"\0{stat.st_size}\0{stat.st_mtime_ns}\0{dtype}".encode()).hexdigest()[:24]
    return cache_root() / "profiles" / f"gguf-{key}.json"


# GGUF metadata value types (ggml's gguf.h): fixed-width scalars by struct format, 8 string, 9 array
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


def read_header(path: Path) -> tuple[dict, dict[str, tuple[int, ...]]]:
    """(metadata, tensor shapes) of a GGUF file, parsed from its header as the format documents it
    (ggml's docs/gguf.md); arrays are kept as their length, tensor data never read. A reader of
    its own: gguf's GGUFReader builds every array element into Python (20 s for a 151k-token
    vocabulary) and transformers' header class refuses some quantization types."""
    with _mapped(path) as blob:
        version, tensor_count, _ = struct.unpack_from("<IQQ", blob, 4)
        if version < 2:
            raise ValueError(f"GGUF version {version} is too old")
        metadata, pos = _metadata(blob)
        shapes: dict[str, tuple[int, ...]] = {}
        for _ in range(tensor_count):
            name, pos = _string(blob, pos)
            (dims,) = struct.unpack_from("<I", blob, pos)
            shapes[name] = tuple(reversed(struct.unpack_from(f"<{dims}Q", blob, pos + 4)))
            pos += 4 + 8 * dims + 12  # the dimensions, then the ggml type (u32) and the data offset (u64)
        return metadata, shapes


_FULL_ARRAYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges")


def read_tokenizer_metadata(path: Path) -> dict:
    """The header's metadata as transformers' GGUF reader gives it to its tokenizer builder:
    arrays of numbers as lists, the vocabulary and the merges as lists of strings, other string
    arrays as their length."""
    with _mapped(path) as blob:
        return _metadata(blob, keep=_FULL_ARRAYS)[0]


@contextmanager
def _mapped(path: Path):
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as blob:
        if blob[:4] != b"GGUF":
            raise ValueError("no GGUF magic")
        yield blob


def _metadata(blob, keep: tuple[str, ...] | None = None) -> tuple[dict, int]:
    """The key/value section: (metadata, the tensor table's offset). Arrays are kept as their
    length, unless `keep` is given: then arrays of numbers as lists, and the string arrays it
    names as lists of strings."""
    (kv_count,) = struct.unpack_from("<Q", blob, 16)
    pos = 24
    metadata: dict = {}
    for _ in range(kv_count):
        key, pos = _string(blob, pos)
        (kind,) = struct.unpack_from("<I", blob, pos)
        pos += 4
        if keep is None or kind != _ARRAY:
            metadata[key], pos = _value(blob, pos, kind)
            continue
        element, count = struct.unpack_from("<IQ", blob, pos)
        if element in _SCALARS:
            metadata[key] = list(struct.unpack_from(f"<{count}{_SCALARS[element][1]}", blob, pos + 12))
            pos += 12 + count * struct.calcsize(_SCALARS[element])
        elif element == _STRING and key in keep:
            metadata[key], pos = _strings(blob, pos + 12, count)
        else:
            metadata[key], pos = _value(blob, pos, _ARRAY)
    return metadata, pos


def _strings(blob, pos: int, count: int) -> tuple[list[str], int]:
    """`count` GGUF strings from `pos`: one length-prefixed slice each."""
    length_at = struct.Struct("<Q").unpack_from
    out = []
    for _ in range(count):
        (length,) = length_at(blob, pos)
        pos += 8
        out.append(blob[pos : pos + length].decode("utf-8"))
        pos += length
    return out, pos


def _string(blob, pos: int) -> tuple[str, int]:
    (length,) = struct.unpack_from("<Q", blob, pos)
    return bytes(blob[pos + 8 : pos + 8 + length]).decode("utf-8", "replace"), pos + 8 + length


def _value(blob, pos: int, kind: int):
    if kind in _SCALARS:
        (value,) = struct.unpack_from(_SCALARS[kind], blob, pos)
        return value, pos + struct.calcsize(_SCALARS[kind])
    if kind == _STRING:
        return _string(blob, pos)
    if kind != _ARRAY:
        raise ValueError(f"unknown GGUF value type {kind}")
    element, count = struct.unpack_from("<IQ", blob, pos)
    pos += 12
    if element in _SCALARS:
        return count, pos + count * struct.calcsize(_SCALARS[element])
    if element == _STRING:
        for _ in range(count):  # skipped: only the length of a string array is kept
            (length,) = struct.unpack_from("<Q", blob, pos)
            pos += 8 + length
        return count, pos
    for _ in range(count):  # an array of arrays
        _, pos = _value(blob, pos, element)
    return count, pos
