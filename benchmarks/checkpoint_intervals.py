"""How often a run commits its answers (and its progress bar moves): seconds between checkpoints.

    python benchmarks/checkpoint_intervals.py [--model smollm2] [--reviews 200] [--burners 2]

One AI.IF over SemBench reviews through the product path, with a progress recorder that stamps
every checkpoint (answers committed to the result cache, the bar advanced). Optionally beside N
CPU-burning processes, the busy machine on which a fixed 256-prompt chunk was the whole node.
Results: results/checkpoint_intervals_<model>.json; RESULTS.md §25.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, model_argument, write  # noqa: E402
from phrasing import sample  # noqa: E402


def burn() -> None:
    while True:
        pass


class Stamps:
    def __init__(self) -> None:
        self.events: list[tuple[float, int]] = []
        self.started = None

    def start(self, node, description, total, cached):
        self.started = time.perf_counter()

    def advance(self, node, prompts, tokens):
        self.events.append((time.perf_counter(), prompts))

    def finish(self, node):
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--reviews", type=int, default=200)
    parser.add_argument("--burners", type=int, default=0)
    args = parser.parse_args()
    import aisql

    burners = [multiprocessing.Process(target=burn, daemon=True) for _ in range(args.burners)]
    for process in burners:
        process.start()
    try:
        with tempfile.TemporaryDirectory() as directory:
            con = aisql.connect(model=model_argument(args.model), cache=str(Path(directory) / "answers.sqlite"))
            con.duckdb.register("reviews", sample(args.reviews))
            stamps = Stamps()
            con.run("SELECT count(*) FROM reviews WHERE AI.IF(PROMPT('Is the following movie review positive? {reviewText}'))", progress=stamps)
            con.close()
    finally:
        for process in burners:
            process.terminate()
    times = [stamps.started] + [t for t, _ in stamps.events]
    gaps = [round(b - a, 2) for a, b in zip(times, times[1:])]
    record = {
        "model": args.model,
        "reviews": args.reviews,
        "burners": args.burners,
        "checkpoints": len(stamps.events),
        "prompts_per_checkpoint": [n for _, n in stamps.events],
        "seconds_between_checkpoints": gaps,
        "longest_gap_s": max(gaps),
        "machine": machine(),
    }
    print(record)
    print(write(f"checkpoint_intervals_{args.model}_{args.burners}burners", record))


if __name__ == "__main__":
    main()
