"""What a run measures before and while it plans: selectivity samples, throughput, statistics."""
