"""Decoding: the decode step, speculative drafts, token sampling, and constraints (typed literals, JSON schemas)."""
