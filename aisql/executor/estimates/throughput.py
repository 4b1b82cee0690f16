"""What the engine really achieves, remembered per model: computed tokens per second of AI-node
time in planned and naive runs, and how long the model took to load — so `explain` and the
`--max-cost` check price a query from measured speed instead of a matmul peak.

Kept as a small JSON file beside the result cache, keyed by the model's fingerprint (weights,
quantization, device, dtype) and aisql's version; runs too small to say anything (< 500 computed
tokens) are not recorded. Explain reads it without torch or the model.

Planned runs are also split by phase, as their costs differ several-fold per token: prefill (the
scoring nodes' tokens per second, read in batched passes) and decode (seconds per decode step:
a step moves a whole batch of answers on by a token — speculative drafts and their checks
included — so a step, not a token, is what costs) — a
single rate priced generation at the scoring rate, 2x low for Qwen2.5-0.5B (issue 60). A model
never run here is priced from the models that were: prefill in proportion to the parameters
multiplied per token, a decode pass to the bytes of weights it reads (`scaled`); a machine that
has run nothing yet, from aisql's reference measurement (REFERENCE_DECODE_PASS).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from aisql.engine.model.first_run import seconds_by_size

if TYPE_CHECKING:
    from aisql.planner.hardware import Hardware

MIN_TOKENS = 500


@dataclass(frozen=True)
class Measured:
    planned_tokens_per_s: float | None
    naive_tokens_per_s: float | None
    load_s: float | None
    runs: int
    load: float | None = None  # cores other work kept busy while the speed was measured (about)
    prefill_tokens_per_s: float | None = None  # the scoring nodes' computed tokens per second
    decode_pass_s: float | None = None  # seconds per decode step of the generating nodes (their prefill taken out)
    source: str = "measured with this model"
    overhead_s: float | None = None  # a run's time outside its AI nodes (binding, planning, DuckDB), mean of recent runs


def log_path() -> Path:
    from aisql.paths import cache_root

    return cache_root() / "throughput.json"


def _key(fingerprint: str) -> str:
    from aisql.version import __version__

    return f"{fingerprint}|{__version__}"


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def lookup(fingerprint: str, path: Path | None = None) -> Measured | None:
    entry = _read(path or log_path()).get(_key(fingerprint))
    return _measured(entry) if entry else None


def _measured(entry: dict) -> Measured:
    """One model's entry of the log as rates."""
    def rate(mode: str) -> float | None:
        tokens, seconds = entry.get(f"{mode}_tokens", 0), entry.get(f"{mode}_seconds", 0.0)
        return tokens / seconds if tokens >= MIN_TOKENS and seconds > 0 else None

    return Measured(
        rate("planned"), rate("naive"), entry.get("load_s"), entry.get("runs", 0), entry.get("busy_elsewhere"),
        prefill_tokens_per_s=rate("prefill"), decode_pass_s=_decode_pass(entry, rate("prefill")), overhead_s=entry.get("overhead_s"),
    )


def _decode_pass(entry: dict, prefill_rate: float | None) -> float | None:
    """Seconds per decode step: the generating nodes' time less their prompts' prefill (at the
    scoring rate, where measured), over their decode steps."""
    passes, prompt_tokens, seconds = entry.get("decode_steps", 0), entry.get("decode_prompt_tokens", 0), entry.get("decode_seconds", 0.0)
    if entry.get("decode_tokens", 0) < MIN_DECODE_TOKENS or passes <= 0 or seconds <= 0:
        return None
    decoding = seconds - (prompt_tokens / prefill_rate if prefill_rate else 0.0)
    return max(decoding, 0.25 * seconds) / passes


MIN_DECODE_TOKENS = 100


def scaled(fingerprint_key: str | None, params: int, weight_bytes: int, path: Path | None = None, need_decode: bool = False) -> Measured | None:
    """A model never measured here, priced from those that were (this aisql version, local
    engines): prefill in proportion to the parameters per token, decode to the weight bytes read
    per pass — from the measured model nearest in size. None when none was measured."""
    from aisql.version import __version__

    best = None
    for key, entry in _read(path or log_path()).items():
        if not key.endswith(f"|{__version__}") or key.startswith(("openai:", "vllm:")) or key == fingerprint_key:
            continue
        if not entry.get("params") or not entry.get("weight_bytes"):
            continue
        measured = _measured(entry)
        if (measured.prefill_tokens_per_s or measured.planned_tokens_per_s) is None:
            continue
        if need_decode and measured.decode_pass_s is None:
            continue
        distance = abs(math.log(entry["params"] / params))
        if best is None or distance < best[0]:
            best = (distance, entry, measured, entry.get("model") or key.split("|", 1)[0][:12])
    if best is None:
        return None
    _, entry, measured, name = best
    compute, memory = entry["params"] / params, entry["weight_bytes"] / weight_bytes
    prefill = (measured.prefill_tokens_per_s or measured.planned_tokens_per_s) * compute
    return Measured(
        prefill, (measured.naive_tokens_per_s or 0.0) * compute or None, None, 0, measured.load,
        prefill_tokens_per_s=prefill,
        decode_pass_s=measured.decode_pass_s / memory if measured.decode_pass_s else None,
        source=f"scaled from {name}'s speed measured here (this model not run here yet)",
    )


def record(
    fingerprint: str,
    mode: str,
    tokens: int,
    seconds: float,
    load_s: float | None = None,
    path: Path | None = None,
    busy_elsewhere: float | None = None,
    weight_bytes: int | None = None,
    phases: dict[str, float] | None = None,
    shape: dict | None = None,
) -> None:
    """Add one run's AI work (`mode` planned or naive) to the model's totals (best effort: a
    read-only cache directory only means explain stays uncalibrated)."""
    if tokens < MIN_TOKENS or seconds <= 0:
        return
    path = path or log_path()
    data = _read(path)
    entry = data.setdefault(_key(fingerprint), {})
    # Recent runs count most: older totals decay, so a faster engine or machine shows soon.
    for field in (f"{mode}_tokens", f"{mode}_seconds"):
        entry[field] = entry.get(field, 0) * 0.5
    entry[f"{mode}_tokens"] += tokens
    entry[f"{mode}_seconds"] += seconds
    entry["runs"] = entry.get("runs", 0) + 1
    for field, value in (phases or {}).items():  # prefill_/decode_ tokens and seconds, decaying alike
        if field == "overhead_s":
            entry[field] = round(0.5 * entry.get(field, value) + 0.5 * value, 3)
        else:
            entry[field] = entry.get(field, 0) * 0.5 + value
    entry.update(shape or {})  # params, weight_bytes, model: to price other models from this one
    if load_s is not None:  # recent loads averaged: one slow disk read should not set the estimate
        entry["load_s"] = round(0.5 * entry.get("load_s", load_s) + 0.5 * load_s, 3)
        if weight_bytes:
            entry["weight_bytes"] = int(weight_bytes)
    if busy_elsewhere is not None:  # decays with the rates it describes
        entry["busy_elsewhere"] = round(0.5 * entry.get("busy_elsewhere", busy_elsewhere) + 0.5 * busy_elsewhere, 2)
    from aisql.paths import save_cache_file

    save_cache_file(path, json.dumps(data, indent=1))


def calibrated(profile: "Hardware", measured: "Measured | None") -> "Hardware":
    """The profile with this model's measured speed from earlier runs (or other models' scaled to
    it), when there is one: prefill at the scoring rate where it is known, decode at its own."""
    if measured is None:
        return profile
    if measured.planned_tokens_per_s is None:  # only a decode pass known (the reference): the FLOP model for the rest
        return dataclasses.replace(profile, decode_pass_s=measured.decode_pass_s)
    return dataclasses.replace(
        profile,
        planned_tokens_per_s=measured.prefill_tokens_per_s or measured.planned_tokens_per_s,
        naive_tokens_per_s=measured.naive_tokens_per_s,
        decode_pass_s=measured.decode_pass_s,
        speed_source=measured.source,
    )


def measured_here(profile: "Hardware", session) -> "Measured | None":
    """Runs measured this machine: they price its own profile only, never a GPU profile. A model
    not run here yet is priced from the models that were (`scaled`)."""
    if profile.name != session.default_hardware():
        return None
    fingerprint = session.known_fingerprint()  # explain never measures the numerics
    measured = lookup(fingerprint) if fingerprint is not None else None
    try:
        shape = session.facts().profile
    except Exception:  # a model whose shape cannot be read (a remote server): the FLOP model prices it
        return measured
    if measured is None or measured.planned_tokens_per_s is None:
        measured = scaled(_key(fingerprint) if fingerprint else None, shape.params, shape.weight_bytes) or measured
    if measured is None or measured.decode_pass_s is None:
        other = scaled(_key(fingerprint) if fingerprint else None, shape.params, shape.weight_bytes, need_decode=True)
        per_pass = other.decode_pass_s if other is not None else REFERENCE_DECODE_PASS[1] * shape.weight_bytes / REFERENCE_DECODE_PASS[0]
        measured = dataclasses.replace(measured, decode_pass_s=per_pass) if measured is not None else Measured(None, None, None, 0, decode_pass_s=per_pass)
    return measured


# aisql's own measurement, for a machine where no model has generated yet: SmolLM2-135M (538 MB of
# float32 weights) took this long per decode step (10 answers, prompt-lookup drafts on) on a 2-core
# AMD EPYC (2026-12-07), scaled by a model's weight bytes (a step reads them all).
REFERENCE_DECODE_PASS = (538_060_032, 0.31)


def remember(session, nodes, mode: str, run_started: float | None = None) -> None:
    """A run's speed on this machine (its LLM nodes' computed tokens over their time), and its
    load time with the model's weight bytes (for other models' load estimates). Where this run
    loaded the engine, the node that needed it first spent the start-up (imports, a conversion,
    the load) inside its time: taken out, so a first run's speed is the model's, not its load's."""
    startup = session.startup_s if run_started is not None and session.ready_at is not None and session.ready_at >= run_started else 0.0
    first = next((n for n in nodes if n.computed_tokens and n.wall_s >= startup), None) if startup else None
    seconds_of = {id(n): max(n.wall_s - (startup if n is first else 0.0), 0.0) for n in nodes}
    tokens = sum(n.computed_tokens for n in nodes)
    seconds = sum(seconds_of.values())
    weight_bytes, shape = None, {}
    try:
        profile = session.facts().profile
        shape = {"params": int(profile.params), "weight_bytes": int(profile.weight_bytes), "model": session.model_name()}
        weight_bytes = int(profile.weight_bytes) if session.load_s is not None else None
    except Exception:  # a model without a profile: its speed and load are still kept, unscaled
        pass
    phases = _phases(nodes, seconds_of) if mode == "planned" else {}
    if run_started is not None and mode == "planned":
        import time

        phases["overhead_s"] = max(0.0, time.perf_counter() - run_started - sum(n.wall_s for n in nodes))
    record(session.fingerprint(), mode, tokens, seconds, load_s=session.load_s, busy_elsewhere=busy_elsewhere(), weight_bytes=weight_bytes, phases=phases, shape=shape)


def _decode_steps(node) -> float:
    """A generating node's decode steps as the cost model counts them: its batches of prompts
    (DECODE_BATCH answers each) times the tokens each answer took."""
    from aisql.planner.cost import DECODE_BATCH

    prompts = max(node.prompts_evaluated, 1)
    return math.ceil(prompts / DECODE_BATCH) * node.generated_tokens / prompts


def _phases(nodes, seconds_of: dict[int, float] | None = None) -> dict[str, float]:
    """A planned run's work by phase: scoring nodes' tokens and time (prefill), generating nodes'
    generated tokens, prompt tokens and time (decode, less its prefill at lookup)."""
    def seconds(n) -> float:
        return seconds_of[id(n)] if seconds_of is not None else n.wall_s

    scoring = [n for n in nodes if not n.generated_tokens and n.computed_tokens]
    generating = [n for n in nodes if n.generated_tokens]
    phases = {}
    if sum(n.computed_tokens for n in scoring) >= MIN_TOKENS:
        phases.update(prefill_tokens=sum(n.computed_tokens for n in scoring), prefill_seconds=sum(map(seconds, scoring)))
    if sum(n.generated_tokens for n in generating) >= MIN_DECODE_TOKENS:
        phases.update(
            decode_tokens=sum(n.generated_tokens for n in generating),
            decode_steps=sum(_decode_steps(n) for n in generating),
            decode_prompt_tokens=sum(n.computed_tokens - n.generated_tokens for n in generating),
            decode_seconds=sum(map(seconds, generating)),
        )
    return phases


# aisql's own measurement, for a machine that has loaded nothing yet: SmolLM2-135M (538 MB of
# float32 weights) loaded in 5.8 s, torch and transformers imported, on a 2-core AMD EPYC (2026-12-07).
REFERENCE_LOAD = (538_060_032, 5.8)


def reference_load(weight_bytes: int) -> float:
    """A first load on a machine with no load measured: the reference scaled as other loads are."""
    size, seconds = REFERENCE_LOAD
    return seconds * (weight_bytes / size) ** 0.5


def estimated_load(weight_bytes: int, path: Path | None = None) -> tuple[float, int] | None:
    """(seconds, loads it rests on) to load a model of `weight_bytes` never loaded here, from the
    loads of other models measured on this machine (local engines only): load ~ a + b * bytes,
    fitted when their sizes differ, else the one size's load scaled by the square root of the
    size ratio (a load is mostly fixed cost — imports, kernel choice — at these sizes). None when
    no model was loaded here yet."""
    from aisql.version import __version__

    points = [
        (float(entry["weight_bytes"]), float(entry["load_s"]))
        for key, entry in _read(path or log_path()).items()
        if key.endswith(f"|{__version__}") and not key.startswith(("openai:", "vllm:")) and entry.get("load_s") and entry.get("weight_bytes")
    ]
    if not points:
        return None
    return seconds_by_size(points, weight_bytes), len(points)


def busy_elsewhere() -> float | None:
    """About how many cores other work kept busy during the run just ended: the 1-minute load
    average less this process's own compute threads (no extra sampling at the end of a run)."""
    import os
    import sys

    try:
        load = os.getloadavg()[0]
    except OSError:
        return None
    torch = sys.modules.get("torch")
    own = torch.get_num_threads() if torch is not None else 1
    return max(0.0, load - own)
