"""Scale-out: one query's AI work spread over several engines, each a Ray actor (`aisql[ray]`).

DuckDB, the planner and the result cache stay on the driver; workers only answer shards of
prepared prompts (token ids). Nothing here imports Ray until a pool is started.
"""
