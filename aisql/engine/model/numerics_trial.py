"""One dtype's answers to the numerics calibration questions, with the CPU seconds they cost:
what `--dtype auto` compares (aisql.engine.model.auto_numerics). The model answers through the
engine's own scoring path, as a run would (prefix cache on), so what is measured is what runs."""

from __future__ import annotations

from pathlib import Path

from aisql.engine.model.auto_numerics import Trial, calibration_questions, process_cpu_seconds
from aisql.engine.model.prompt_format import Framing, encode_labels

FRAMING = Framing(system=None, answer_prefix="The answer is:", label_prefix=" ")  # as AI.IF asks (the model's own system message)
LABELS = ("Yes", "No")
WARM_UP = 4  # questions answered before timing: first-call allocations are not the dtype's cost


def calibration_trial(directory: Path, dtype: str) -> Trial:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aisql.engine.backends.hf import HFEngine
    from aisql.engine.base import ModelInfo, ScoreRequest

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=getattr(torch, dtype))
    from aisql.engine.model import linear_kernels

    linear_kernels.apply(model, dtype)  # each numerics on the kernel it would run on
    info = ModelInfo(name="calibration", source=str(directory), device="cpu", dtype=dtype, max_context=4096, fingerprint="calibration")
    engine = HFEngine(model, tokenizer, info, max_batch_tokens=16384, max_batch_size=64, kv_budget_bytes=256 << 20, speculation=None)
    questions = [question for question, _ in calibration_questions()]
    prompts = engine.encode_prompts(FRAMING, questions)
    labels = encode_labels(engine.encode_label, engine.format.end_of_answer, LABELS, FRAMING)
    requests = [ScoreRequest(tuple(p), labels) for p in prompts]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # CPU seconds of the arithmetic, not of threads waiting for a busy core
    try:
        engine.score(requests[:WARM_UP])
        engine.reset_cache()
        before_tokens = engine.stats.computed_tokens
        started = process_cpu_seconds()
        scores = engine.score(requests)
        cpu_s = process_cpu_seconds() - started
    finally:
        torch.set_num_threads(threads)
    answers = [s.best == 0 for s in scores]
    margins = [s.logprobs[0] - s.logprobs[1] for s in scores]
    return Trial(dtype, round(cpu_s, 3), engine.stats.computed_tokens - before_tokens, answers, margins=margins)
