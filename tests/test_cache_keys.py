"""Result-cache keys are a contract with every cache already on disk: the values below were
computed by aisql 0.1.0 at commit 0feeee6 and must never change by accident (a changed key
silently pays for every cached answer again; a reused key could serve a wrong one)."""

from __future__ import annotations

from pathlib import Path

from aisql.engine.loader import EngineOptions, hf_fingerprint
from aisql.functions import by_name
from aisql.functions.ai_classify import ClassifyOptions
from aisql.functions.ai_generate import GenerateOptions
from aisql.functions.base import Options


def test_task_keys_are_unchanged():
    assert by_name("IF").task(Options()).store_key("FP") == "FP/0ef14eac8d7ded44"
    assert by_name("CLASSIFY").task(ClassifyOptions(("a", "b c"))).store_key("FP") == "FP/1d072cc02143e671"
    assert by_name("GENERATE").task(GenerateOptions(7)).store_key("FP") == "FP/ce85d2f83d33fd92"


def test_model_fingerprints_are_unchanged(tmp_path: Path):
    (tmp_path / "config.json").write_text('{"a": 1}')
    (tmp_path / "model.safetensors").write_text("w")
    (tmp_path / "tokenizer.json").write_text("x")
    assert hf_fingerprint(tmp_path, EngineOptions()) == "5b6410859fe4a655/cpu/float32"
    assert hf_fingerprint(tmp_path, EngineOptions(dtype="bfloat16", quantize="int8")) == "5b6410859fe4a655/cpu/bfloat16/int8"


def test_planning_tokenizer_encodes_as_the_engine(tiny_engine):
    """Planning reads tokenizer.json without transformers; its ids must be the engine's."""
    from aisql.engine.facts import model_facts

    facts = model_facts(Path(tiny_engine.tokenizer.name_or_path), "tiny", "float32")
    texts = ["hello world", "Some longer text, with punctuation!\nand lines", "", "<|im_end|> inside"]
    assert facts.format.encode_prompts("An instruction.", texts) == tiny_engine.encode_prompts("An instruction.", texts)
    assert facts.format.frame("An instruction.") == tiny_engine.format.frame("An instruction.")
    assert facts.encode_label("TRUE") == tiny_engine.encode_label("TRUE")
