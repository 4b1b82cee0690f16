"""aisql serve: an OpenAI-compatible HTTP API (Starlette + uvicorn) over the engine's continuous-batching loop (aisql.engine.continuous)."""
