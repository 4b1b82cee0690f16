"""A query's rows and label scores from any engine: imported by tests/test_vllm_real.py here and
by its child process in vLLM's own environment (which has no pytest)."""

from __future__ import annotations

import json


def run_query(engine, texts: list[str], sql: str) -> dict:
    """The query's rows and every label score the engine gave, keyed by prompt and label ids.
    Runs here for the embedded engine and, through CHILD, in vLLM's environment."""
    import aisql

    scores = {}
    inner = engine.score

    def score(requests, **kwargs):
        out = inner(requests, **kwargs)
        for request, result in zip(requests, out):
            scores[" ".join(map(str, request.prompt_ids)) + "|" + json.dumps(request.label_ids)] = list(result.logprobs)
        return out

    engine.score = score
    con = aisql.Connection(engine=engine, cache=False)
    con.duckdb.execute("CREATE TABLE reviews AS SELECT * FROM (SELECT unnest(range(?)) AS id, unnest(?) AS text)", [len(texts), texts])
    return {"rows": con.run(sql).table.to_pylist(), "scores": scores, "dtype": engine.info.dtype, "device": engine.info.device}
