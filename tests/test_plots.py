"""benchmarks/plots.py draws its pictures from results files (here: tiny made-up ones)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # matplotlib renders every benchmark plot

pytest.importorskip("matplotlib")
ROOT = Path(__file__).resolve().parent.parent


def _plots():
    spec = importlib.util.spec_from_file_location("plots", ROOT / "benchmarks" / "plots.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["plots"] = module
    spec.loader.exec_module(module)
    return module


def test_plots_from_results(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    for i, name in enumerate(("Q1_hot_leads", "Q2_reviews")):
        (results / f"{name}.json").write_text(json.dumps({
            "naive": {"computed_tokens": 1000 * (i + 2)}, "planned": {"computed_tokens": 300 + i}, "prefix_tree_minimum": 300 + i,
        }))
    turns = [{"prompt_tokens": 100 * t, "ttft_s": 0.01 * t, "ttft_no_reuse_s": 0.03 * t} for t in range(1, 4)]
    (results / "agent_trace.json").write_text(json.dumps({"ttft": {"turns": turns}}))
    load = {"tokens_per_s": 10.0, "ttft_p50_ms": 50.0}
    (results / "load_test.json").write_text(json.dumps({"modes": {"continuous_batching": load, "one_at_a_time": load}}))
    written = _plots().main(["--results", str(results), "--out", str(tmp_path / "plots")])
    assert sorted(p.name for p in written) == ["serving.png", "tokens.png", "ttft.png"]
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
    assert _plots().main(["--results", str(tmp_path / "none"), "--out", str(tmp_path / "empty")]) == []  # nothing to draw: skipped
