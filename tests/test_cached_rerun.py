"""A rerun whose answers are all in the result cache loads nothing it does not need: no model
weights, no torch — also when two AI conjuncts make the planner ask for token counts."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import pytest

QUERY = (
    "SELECT id FROM reviews WHERE rating <= 4 "
    "AND AI.IF(PROMPT('Review: {review} Question: is the delivery late?')) "
    "AND AI.IF(PROMPT('Review: {review} Question: is the tone hostile?'))"
)
SCRIPT = textwrap.dedent(
    """
    import json, sys
    import aisql

    con = aisql.connect(model="tiny", cache=sys.argv[1], **({"cluster": 2} if sys.argv[4:] == ["workers"] else {}))
    con.register("reviews", sys.argv[2])
    result = con.run(sys.argv[3])
    print(json.dumps({
        "torch": "torch" in sys.modules,
        "ray": "ray" in sys.modules,
        "rows": sorted(r["id"] for r in result.table.to_pylist()),
        "evaluated": result.stats.totals()["prompts_evaluated"],
        "cached": result.stats.totals()["prompts_cached"],
        "loaded": result.model.device is not None,
    }))
    """
)


def _run(cache, data, *extra: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(cache), str(data), QUERY, *extra], capture_output=True, text=True, check=True, timeout=600
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_fully_cached_rerun_imports_no_torch(tmp_path, monkeypatch):
    from conftest import EXAMPLES

    data = EXAMPLES / "data" / "reviews.csv"
    first = _run(tmp_path / "answers.sqlite", data)
    assert first["evaluated"] > 0 and first["loaded"]
    assert not first["ray"], "Ray was imported although no --workers / cluster= asked for it"
    second = _run(tmp_path / "answers.sqlite", data)
    assert second["rows"] == first["rows"]
    assert second["evaluated"] == 0 and second["cached"] > 0
    assert not second["loaded"], "the model was loaded although every answer was cached"
    assert not second["torch"], "torch was imported although every answer was cached"
    on_workers = _run(tmp_path / "answers.sqlite", data, "workers")  # cluster=2: the same cache keys
    assert on_workers["rows"] == first["rows"] and on_workers["evaluated"] == 0
    assert not on_workers["loaded"] and not on_workers["ray"], "a fully cached rerun on workers started Ray"
