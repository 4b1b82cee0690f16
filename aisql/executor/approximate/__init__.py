"""Approximate mode: a proxy answers the rows it is sure of (cascade, score-first, importance sampling)."""
