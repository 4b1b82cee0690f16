"""What planning needs of a model without loading its weights: its prompt format and its shape.

`aisql explain` and the planner of a run whose answers are cached must not pay for the weights,
nor for importing torch or transformers. The tokenizer is read from the model's `tokenizer.json`
with Rust `tokenizers` (aisql.engine.model.light_tokenizer) wherever the model ships one; the shape (parameters, layers, KV bytes per token) is measured once by building
the model on torch's meta device and kept in aisql's cache dir, keyed by the configuration's
content and the dtype.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path

from aisql.engine.base import ModelFacts, ModelProfile
from aisql.errors import ModelError
from aisql.engine.model.prompt_format import EncodesPrompts, PromptFormat
from aisql.paths import cache_root, save_cache_file

PROFILE_VERSION = 3  # 2: the context length (max_context) is part of the profile; 3: weights of oneDNN-packed layers counted


def load_tokenizer(directory: str | os.PathLike):
    """The model's tokenizer for planning: read from tokenizer.json without transformers where
    the model ships one (aisql.engine.model.light_tokenizer), else transformers' own."""
    from aisql.engine.model.light_tokenizer import LightTokenizer

    if LightTokenizer.available(directory):
        return LightTokenizer(directory)
    import transformers
    from transformers import AutoTokenizer

    transformers.utils.logging.set_verbosity_error()
    return AutoTokenizer.from_pretrained(directory)


def model_facts(directory: str | os.PathLike, name: str, dtype: str) -> ModelFacts:
    """Prompt format and shape of the model in `directory`, computed in `dtype`, no weights loaded."""
    from aisql.engine.model.model_files import loader_failure

    encoder = EncodesPrompts()
    try:
        encoder.format = PromptFormat(load_tokenizer(directory))
    except ModelError:
        raise
    except Exception as err:  # tokenizers' or transformers' own failure on a damaged tokenizer
        raise loader_failure(f"the tokenizer of {name}", directory, err) from None
    try:
        profile = cached_profile(directory, name, dtype)
    except ModelError:
        raise
    except Exception as err:  # an architecture transformers does not know, a config it cannot build
        raise loader_failure(f"the configuration of {name}", directory, err) from None
    return ModelFacts(format=encoder.format, profile=profile, encode_label=encoder.encode_label)


def cached_profile(directory: str | os.PathLike, name: str, dtype: str) -> ModelProfile:
    """The model's shape from its configuration: measured once (torch, meta device), then read."""
    path = _profile_path(directory, dtype)
    try:
        return ModelProfile(**{**json.loads(path.read_text()), "name": name})
    except (OSError, ValueError, TypeError):
        pass
    import torch

    from aisql.engine.model.profile import profile_from_config

    profile = profile_from_config(directory, name, getattr(torch, dtype))
    remember_profile(directory, dtype, profile)
    return profile


def remember_profile(directory: str | os.PathLike, dtype: str, profile: ModelProfile) -> None:
    """Keep a shape measured on the loaded model, so later planning needs no torch."""
    path = _profile_path(directory, dtype)
    if path.exists():
        return
    save_cache_file(path, json.dumps(asdict(profile)))  # an unwritable cache only costs measuring again


def _profile_path(directory: str | os.PathLike, dtype: str) -> Path:
    config = (Path(directory) / "config.json").read_bytes()
    key = hashlib.sha256(config + f"\0{dtype}\0{PROFILE_VERSION}".encode()).hexdigest()[:24]
    return cache_root() / "profiles" / f"{key}.json"
