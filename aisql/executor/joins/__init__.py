"""AI joins: pairs answered per anchor, and the rewrite of a join as classification."""
