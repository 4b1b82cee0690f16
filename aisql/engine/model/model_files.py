"""Whether a directory holds a model transformers can load, decided from its files first.

A user names a model by a directory (`--model ./m`, `--proxy-model ./m`, `openai:./m@URL`,
`--embed-model ./m`). Transformers, handed a directory that is not a model, fails somewhere deep
with messages such as "Couldn't instantiate the backend tokenizer from one of:" or a KeyError on
a config field. The checks here name the missing or unreadable file instead, before any loader
runs; `loader_failure` turns whatever a loader still raises into the same kind of one-line error.
"""

from __future__ import annotations

import json
from pathlib import Path

from aisql.errors import ModelError

# Files one of which a tokenizer transformers can build needs (fast, SentencePiece, BPE, WordPiece, tiktoken).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "spiece.model", "vocab.json", "vocab.txt", "tokenizer.tiktoken")
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin", "*.safetensors.index.json", "pytorch_model.bin.index.json")


def check_model_directory(directory: Path, name: str, *, weights: bool = True) -> None:
    """Refuse, naming the file, a directory whose configuration is unreadable or names no
    architecture, that has no tokenizer, or (when `weights`) no weights."""
    config = read_config(directory, name)
    if not isinstance(config.get("model_type"), str) or not config["model_type"]:
        raise ModelError(
            f"{name} is not a loadable model: {directory / 'config.json'} names no model_type",
            hint="a Hugging Face model directory's config.json has \"model_type\" (e.g. \"llama\", \"qwen2\")",
        )
    if not any((directory / file).is_file() for file in TOKENIZER_FILES):
        raise ModelError(
            f"{name} is not a loadable model: {directory} has no tokenizer (none of {', '.join(TOKENIZER_FILES)})",
            hint="copy the model's tokenizer files beside its config.json",
        )
    if weights and not any(any(directory.glob(pattern)) for pattern in WEIGHT_PATTERNS):
        raise ModelError(
            f"{name} is not a loadable model: {directory} has no weights (no *.safetensors or pytorch_model*.bin)",
            hint="a model directory holds config.json, the tokenizer's files and the weights",
        )


def read_config(directory: Path, name: str) -> dict:
    """The directory's config.json as a JSON object, or a ModelError naming what is wrong with it."""
    if not (directory / "config.json").exists():
        raise ModelError(f"{name} is not a model directory (it has no config.json)")
    return read_json(directory / "config.json", name, dict)


def read_json(path: Path, name: str, kind: type = dict):
    """A model file's JSON (an object, or a list for `kind=list`), or a ModelError naming the file
    and what is wrong with it."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ModelError(f"cannot read {path} of {name}: {first_line(err)}") from None
    try:
        value = json.loads(text)
    except ValueError as err:
        raise ModelError(f"{name} is not a loadable model: {path} is not valid JSON ({err})") from None
    if not isinstance(value, kind):
        wanted = "an object" if kind is dict else "a list"
        raise ModelError(f"{name} is not a loadable model: {path} holds a JSON {type(value).__name__}, not {wanted}")
    return value


def loader_failure(subject: str, location: object, err: BaseException) -> ModelError:
    """The one-line error for a loader (transformers, tokenizers, sentence-transformers) that
    failed on files that passed the checks above: what was being loaded (`subject`, e.g. "the
    tokenizer of ./m"), from where, and the loader's own first line."""
    return ModelError(f"cannot load {subject} from {location}: {type(err).__name__}: {first_line(err)}")


def first_line(err: BaseException) -> str:
    """An exception's first non-empty line (its type's name when it has none): what a one-line error quotes."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0].rstrip(":") if lines else type(err).__name__
