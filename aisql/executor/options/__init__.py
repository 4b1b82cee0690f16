"""How a run is bounded: the budget, the option rules, checkpoint chunk sizes."""
