"""Result-cache keys are a contract with every cache already on disk: they must never change by
accident (a changed key silently pays for every cached answer again; a reused key could serve a
wrong one). GENERATE's key and model fingerprints are those aisql computed at commit 0feeee6.
IF's framing (TRUE/FALSE -> "The answer is: Yes/No") and CLASSIFY's instruction changed on purpose: their
keys must differ from 0feeee6's, so answers cached under the old framing are never served.

Re-pinned on purpose by issue 41: a scored answer's entry keeps every label's raw log-probability
and the decision rule (min_confidence, labelled examples, a calibration) is applied on read, so the
rule left the key. IF with min_confidence used to have a key of its own ("threshold" in the
signature); it now shares the default's, whose entries (which kept P(Yes)) serve any threshold.
Every other key is unchanged."""

from __future__ import annotations

from pathlib import Path

from aisql.engine.model.resolving import hf_fingerprint
from aisql.engine.options import EngineOptions
from aisql.functions import by_name
from aisql.functions.ai_classify import ClassifyOptions
from aisql.functions.ai_generate import GenerateOptions
from aisql.functions.base import Options


OLD_IF, OLD_CLASSIFY = "FP/0ef14eac8d7ded44", "FP/1d072cc02143e671"  # the TRUE/FALSE framing of 0feeee6


def test_task_keys_are_pinned():
    assert by_name("IF").task(Options()).store_key("FP") == "FP/64ae128b57d1a208" != OLD_IF
    assert by_name("CLASSIFY").task(ClassifyOptions(("a", "b c"))).store_key("FP") == "FP/b0bade385783c735" != OLD_CLASSIFY
    assert by_name("GENERATE").task(GenerateOptions(7)).store_key("FP") == "FP/ce85d2f83d33fd92"  # unchanged since 0feeee6
    # issue 41: the rule is not in the key (min_confidence's own key, before: FP/ plus a "threshold" part)
    strict = by_name("IF").options_from_hints("AI.IF", Options(), {"min_confidence": 0.9})
    assert by_name("IF").task(strict).store_key("FP") == "FP/64ae128b57d1a208"


def test_model_fingerprints_are_unchanged(tmp_path: Path):
    (tmp_path / "config.json").write_text('{"a": 1}')
    (tmp_path / "model.safetensors").write_text("w")
    (tmp_path / "tokenizer.json").write_text("x")
    assert hf_fingerprint(tmp_path, EngineOptions(dtype="float32")) == "5b6410859fe4a655/cpu/float32"
    # `auto` on a CPU is chosen by measurement per model (test_auto_numerics); test models stay float32
    assert hf_fingerprint(tmp_path, EngineOptions(), is_test=True) == "5b6410859fe4a655/cpu/float32"
    assert hf_fingerprint(tmp_path, EngineOptions(dtype="bfloat16", quantize="int8")) == "5b6410859fe4a655/cpu/bfloat16/int8"


def test_planning_tokenizer_encodes_as_the_engine(tiny_engine):
    """Planning reads tokenizer.json without transformers; its ids must be the engine's."""
    from aisql.engine.model.facts import model_facts

    facts = model_facts(Path(tiny_engine.tokenizer.name_or_path), "tiny", "float32")
    texts = ["hello world", "Some longer text, with punctuation!\nand lines", "", "<|im_end|> inside"]
    assert facts.format.encode_prompts("An instruction.", texts) == tiny_engine.encode_prompts("An instruction.", texts)
    assert facts.format.frame("An instruction.") == tiny_engine.format.frame("An instruction.")
    assert facts.encode_label("TRUE") == tiny_engine.encode_label("TRUE")
