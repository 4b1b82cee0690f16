"""Where answers are kept: the result cache (SQLite), in-memory stores, the index of cached answers."""
