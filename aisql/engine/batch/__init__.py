"""The embedded engine's batch path, split as vLLM v1 splits it: a scheduler (which tokens run in which pass) and a model runner (forward passes over rows with cached prefixes)."""
