"""The prefix KV cache: a radix tree over token ids with a byte budget and its eviction policy."""
