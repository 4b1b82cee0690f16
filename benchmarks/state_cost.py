"""What keeping hidden states costs, and what float16 storage does to a probe (issue 57).

    python benchmarks/state_cost.py --model smollm2 [--tasks beer,pdmx,sembench] [--seeds 20]

Per task (decision_tasks.py's rows, SemBench's seeded 300): the task's distinct prompts scored by
the engine twice from a cold prefix cache — without and with `keep_state` — CPU seconds of each
(the state is the vector the output head reads: keeping it should cost nothing measurable); the
float32 states of the second pass against the same states rounded to float16 as the cache keeps
them (the largest relative rounding, and over seeded draws of 16 and 32 labelled prompts the
probe's balanced accuracy on the others and how many of their answers differ); and the result
cache's bytes per answer with and without its state (the same answers written to two SQLite
files). Results: results/state_cost_<model>.json (RESULTS.md §34).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from common import model_argument


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--tasks", default="beer,pdmx,sembench")
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()

    from probes import draws, load, summary

    from aisql.engine import load_engine
    from aisql.engine.base import ScoreRequest
    from aisql.engine.model.prompt_format import encode_labels
    from aisql.executor.store.answer_store import Answer
    from aisql.executor.store.cache import SqliteAnswerStore
    from aisql.functions import by_name, decision, probe
    from aisql.functions.decision import Decision
    from aisql.functions.hidden_states import pack_state, unpack_states

    engine = load_engine(model_argument(args.model))
    out = {"model": args.model, "numerics": engine.info.dtype, "tasks": {}}
    for name in args.tasks.split(","):
        data = load(args.model, name)
        function = by_name(data.function)
        task = dataclasses.replace(data.task, decision=Decision("examples", keep_states=True))
        labels = encode_labels(engine.encode_label, engine.format.end_of_answer, task.labels, task.framing)
        ids = engine.encode_prompts(task.framing, data.texts)
        passes = {}
        for keep in (False, True):
            engine.reset_cache()
            started = cpu_seconds()
            scores = engine.score([ScoreRequest(p, labels, keep_state=keep) for p in ids])
            passes[keep] = (cpu_seconds() - started, scores)
        x32 = np.stack([s.state for s in passes[True][1]]).astype(np.float32)
        x16 = unpack_states([pack_state(v) for v in x32])
        rounding = float(np.max(np.abs(x16 - x32) / np.maximum(np.abs(x32), 1e-6)))
        same_logprobs = max(abs(a - b) for s, t in zip(passes[False][1], passes[True][1]) for a, b in zip(s.logprobs, t.logprobs))
        figures = {}
        for size in (16, 32):
            accuracies = {"float32": [], "float16": []}
            differ = []
            for seed in range(args.seeds):
                split = draws(data, size, seed)
                if split is None:
                    break
                examples, scored = split
                targets = [function.probe_target(task, data.labels[i]) for i in examples]
                truth = [data.labels[i] for i in scored]
                answers = {}
                for kind, x in (("float32", x32), ("float16", x16)):
                    fitted = probe.fit(x[examples], targets, function.probe_kind)
                    answers[kind] = [function.value_from_probe(task, p) for p in fitted.predict(x[scored])]
                    accuracies[kind].append(decision.balanced_accuracy(answers[kind], truth))
                differ.append(sum(a != b for a, b in zip(answers["float32"], answers["float16"])) / len(scored))
            if differ:
                figures[str(size)] = {k: summary(v) for k, v in accuracies.items()} | {"answers_differ": summary(differ)}
        sizes = {}
        with tempfile.TemporaryDirectory() as scratch:
            for keep in (False, True):
                path = Path(scratch) / f"{keep}.sqlite"
                store = SqliteAnswerStore(path)
                store.put_many(
                    "k",
                    {
                        text: Answer(True, 10, 0.5, 0.5, tuple(s.logprobs), pack_state(s.state) if keep else None)
                        for text, s in zip(data.texts, passes[True][1])
                    },
                )
                store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                store.close()
                sizes[keep] = os.path.getsize(path)
        record = {
            "prompts": len(data.texts),
            "width": int(x32.shape[1]),
            "cpu_s_without_states": round(passes[False][0], 2),
            "cpu_s_with_states": round(passes[True][0], 2),
            "label_logprobs_max_difference": same_logprobs,
            "float16_max_relative_rounding": rounding,
            "probe": figures,
            "cache_bytes_per_answer": {"without_state": round(sizes[False] / len(data.texts)), "with_state": round(sizes[True] / len(data.texts))},
            "state_bytes": int(x32.shape[1]) * 2,
        }
        out["tasks"][name] = record
        print(name, json.dumps(record), flush=True)
    path = HERE / "results" / f"state_cost_{args.model}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
