"""Resolved models -> engines: the built-in engine over a model directory (or a converted GGUF
file), vLLM, or a remote OpenAI-compatible server; and a model's facts without its weights.
Which model a spec means is decided before, without loading anything
(aisql.engine.model.resolving).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

from aisql.engine.base import Engine, ModelInfo
from aisql.engine.model.resolving import ResolvedModel, is_gguf, resolve_model, resolved_dtype_name
from aisql.engine.options import EngineOptions
from aisql.engine.model.fingerprint import directory_fingerprint, numerics_suffix
from aisql.engine.model.hub import hub_snapshot
from aisql.engine.model.model_files import loader_failure
from aisql.engine.model.fingerprint import vllm_fingerprint  # noqa: F401 - ResolvedModel.fingerprint's, and callers'
from aisql.engine.model.numerics import available_host_memory, device_type, dtype_name

def load_engine(
    spec: str | None = None,
    options: EngineOptions = EngineOptions(),
    warn: Callable[[str], None] | None = None,
) -> Engine:
    return load_resolved(resolve_model(spec, warn), options)


def import_runtime() -> None:
    """Import what the built-in engine runs on (torch, transformers' model classes): the first
    load's largest fixed cost, seconds on a busy machine — done here so a load is timed the same
    whether or not a GGUF conversion imported them first."""
    import torch  # noqa: F401
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401


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
    if model.backend in ("gguf", "openai") and is_gguf(Path(location)):
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
    if is_gguf(location):
        from aisql.engine.model.gguf import convert

        return convert(location, notify)
    return location


def _planning_dtype(options: EngineOptions, device: str, model: ResolvedModel) -> str:
    """The dtype to plan with: `auto` on a CPU as decided for this model if it was, else
    float32 (explain never measures)."""
    if options.dtype == "auto" and device == "cpu" and not options.quantize and model.backend in ("hf", "gguf"):
        from aisql.engine.model.auto_numerics import remembered

        decision = remembered(model.identity())
        return decision.dtype if decision else "float32"
    return dtype_name(options.dtype, device)


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


