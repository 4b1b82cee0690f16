"""The names `aisql serve`'s choices accept, declared once: the CLI's options and the server's
checks read them here."""

ROUTING_POLICIES = ("cache-aware", "round-robin", "least-load")  # which replica takes a request (aisql.serve.routing)
CACHE_ISOLATIONS = ("per-key", "shared")  # the prefix cache per API key, or one for all (aisql.serve.guards)
