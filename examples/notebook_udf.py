"""AI functions on a plain DuckDB connection, as in a notebook.

    python examples/notebook_udf.py [--model tiny]

`aisql.register(con)` adds ai_if, ai_classify, ai_generate and prompt to your own connection:
call them from any DuckDB SQL (WHERE, SELECT, JOIN ... ON). DuckDB hands them one vector of rows
at a time; aisql asks each distinct prompt of a vector once, in prefix order, and keeps answers
in the result cache. It does not plan across vectors — for that (filters pushed below AI calls,
one prompt per distinct pair of an AI join, predicate order), run the query through
`aisql.connect().sql(query)` instead.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import duckdb

import aisql

DATA = Path(__file__).resolve().parent / "data"


def main(argv: list[str] | None = None) -> dict[str, list[tuple]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="Hugging Face id, local directory or 'tiny'")
    parser.add_argument("--cache", default=None, help="result cache file (default: the user cache)")
    args = parser.parse_args(argv)

    con = duckdb.connect()
    con.execute(f"CREATE TABLE customers AS SELECT * FROM read_csv_auto('{DATA / 'customers.csv'}')")
    con.execute(f"CREATE TABLE products AS SELECT * FROM read_csv_auto('{DATA / 'products.csv'}')")
    functions = aisql.register(con, model=args.model, cache=args.cache or True)

    results = {
        # A filter.
        "hikers": con.sql(
            "SELECT name FROM customers "
            "WHERE country = 'Germany' AND ai_if(prompt('{0} Question: does this person love hiking?', profile)) "
            "ORDER BY name"
        ).fetchall(),
        # A classification in the SELECT list, with a label list as a DuckDB array.
        "segments": con.sql(
            "SELECT name, ai_classify(profile, ['student', 'professional', 'retired']) AS segment "
            "FROM customers WHERE id <= 5 ORDER BY id"
        ).fetchall(),
        # Generation, with an optional token budget.
        "slogans": con.sql(
            "SELECT name, ai_generate(prompt('Write a slogan for {0}.', name), 12) AS slogan FROM products WHERE id <= 3 ORDER BY id"
        ).fetchall(),
        # An AI join: DuckDB evaluates the condition on each vector of pairs.
        "matches": con.sql(
            "SELECT c.name, p.name FROM customers c JOIN products p "
            "ON ai_if(prompt('{0} might buy this: {1}', c.profile, p.description)) "
            "WHERE c.id <= 3 AND p.price < 50 ORDER BY 1, 2"
        ).fetchall(),
    }
    for name, rows in results.items():
        print(f"-- {name}: {len(rows)} rows")
        for row in rows[:5]:
            print("  ", row)
    model = functions.session.model_used()
    if model.note:
        print(f"note: {model.note}", file=sys.stderr)
    for name, stats in functions.stats.items():
        print(
            f"{name}: {stats.prompts_total} rows asked · {stats.prompts_evaluated} prompts evaluated · "
            f"{stats.prompts_cached} from the result cache · {stats.computed_tokens} of {stats.logical_tokens} tokens computed",
            file=sys.stderr,
        )
    return results


if __name__ == "__main__":
    main()
