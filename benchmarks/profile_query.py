"""Where a planned query's time goes: operators (torch profiler), passes, and Python (cProfile).

    python benchmarks/profile_query.py [--query Q4] [--rounds 3]

benchmarks/run.py's query on tiny-32k, planned, cold prefix cache, no result cache, the engine's
default threads: `--rounds` timed runs (wall, CPU, computed tokens, passes), then one run under the
torch profiler (operators by self time: linear layers, attention, elementwise work) and one under
cProfile (planning, tokenizer, Python around the passes), and every forward pass of a last run
with its segments, tokens, prefix groups and wall time. Printed, not written: a profile is read,
and RESULTS.md keeps what it said (§33). The numbers are this machine's at this moment: compare
two trees with benchmarks/regression.py, not with a profile from another day.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import bench_engine  # noqa: E402
from datagen import tables  # noqa: E402
from run import QUERIES, connection  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--query", default="Q4", help="Q1, Q2, Q3 or Q4 (benchmarks/run.py's queries)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    names = [q for q in QUERIES if q.split("_")[0] == args.query]
    if not names:
        parser.error(f"--query: unknown query {args.query!r} (expected one of {', '.join(q.split('_')[0] for q in QUERIES)})")
    sql = QUERIES[names[0]]
    engine, data = bench_engine(), tables(1)

    def run():
        engine.reset_cache()
        con = connection(engine, data)
        try:
            return con.run(sql)
        finally:
            con.close()

    for i in range(max(1, args.rounds)):
        wall, cpu = time.perf_counter(), time.process_time()
        totals = run().stats.totals()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(f"run {i}: wall {wall:.3f} s, CPU {cpu:.3f} s, {totals['computed_tokens']} computed tokens, {totals['forward_passes']} passes")

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))

    profiler = cProfile.Profile()
    profiler.enable()
    run()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(45)
    print(text.getvalue())

    from aisql.engine.batch import flat

    original = flat.run_flat

    def timed(model, decoder, cache_kwarg, radix, segments, pad_id):
        _, groups = flat._group(segments)
        shapes = [(g.prefix_len, len(m), sum(len(segments[i].tokens) for i in m)) for g, m in groups]
        started = time.perf_counter()
        out = original(model, decoder, cache_kwarg, radix, segments, pad_id)
        print(
            f"pass: {len(segments)} segments, {sum(len(s.tokens) for s in segments)} tokens, {(time.perf_counter() - started) * 1e3:.0f} ms; "
            f"groups (prefix, segments, tokens): {shapes[:6]}{' ...' if len(shapes) > 6 else ''}"
        )
        return out

    flat.run_flat = timed
    try:
        run()
    finally:
        flat.run_flat = original


if __name__ == "__main__":
    main()
