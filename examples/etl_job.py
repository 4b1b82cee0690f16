"""A batch ETL job: Parquet in -> AI classify + filter -> Parquet out, resumable after a crash.

    python examples/etl_job.py [--input reviews.parquet] [--output complaints.parquet] [--model tiny]

Finds the low-rated reviews that ask for a refund and tags each with a topic. Without --input it
writes examples/data/reviews.csv as Parquet next to the output and reads that (a demo input).

Resumable: every answer is committed to the result cache (default ~/.cache/aisql/answers.sqlite,
or --cache PATH) every 256 prompts while the job runs. If the job is killed, running the same
command again asks the model only for what it had not answered yet; the summary line says how
many answers came from the cache. The output file is written atomically: it is either the
previous complete file or the new complete file, never a partial one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import duckdb

import aisql
from aisql.output import write_table

QUERY = """
SELECT id, product_id, rating, review,
       AI.CLASSIFY(PROMPT('Review: {review} Which topic is it about?'),
                   ['quality', 'size', 'delivery', 'price', 'other']) AS topic
FROM reviews
WHERE rating <= 2
  AND AI.IF(PROMPT('Review: {review} Question: does the customer want their money back?'))
ORDER BY id
"""

DEMO_INPUT = Path(__file__).resolve().parent / "data" / "reviews.csv"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", type=Path, help="Parquet file with id, product_id, rating, review")
    parser.add_argument("--output", type=Path, default=Path("complaints.parquet"))
    parser.add_argument("--model", default=None, help="Hugging Face id, local directory or 'tiny'")
    parser.add_argument("--cache", default=None, help="result cache file (default: the user cache)")
    parser.add_argument("--checkpoint-every", type=int, default=256)
    args = parser.parse_args(argv)

    source = args.input
    if source is None:  # the demo input, as Parquet
        source = args.output.with_name("reviews.parquet")
        duckdb.sql(f"COPY (SELECT * FROM read_csv_auto('{DEMO_INPUT}')) TO '{source}' (FORMAT parquet)")

    con = aisql.connect(model=args.model, cache=args.cache or True, warn=lambda line: print(line, file=sys.stderr))  # lines say what they are (warning: ...)
    con.register("reviews", source)
    complaints = con.sql(QUERY, checkpoint_every=args.checkpoint_every)
    write_table(complaints.to_arrow_table(), args.output)

    result = con.last_result
    totals = result.stats.totals()
    summary = {
        "rows_out": complaints.shape[0],
        "prompts": totals["prompts_total"],
        "evaluated": totals["prompts_evaluated"] + totals["prompts_sampled"],
        "from_cache": totals["prompts_cached"],
    }
    model = result.model
    print(
        f"{summary['rows_out']} complaints -> {args.output} · {summary['evaluated']} prompts asked, "
        f"{summary['from_cache']} from the result cache · model {model.name}"
        + (f" ({model.note})" if model.note else ""),
        file=sys.stderr,
    )
    con.close()
    return summary


if __name__ == "__main__":
    try:
        main()
    except aisql.AisqlError as err:
        sys.exit(f"error: {err}")
