"""How prompt texts become answers: the cache first, the engine in prefix order, committed in checkpoints."""
