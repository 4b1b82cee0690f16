"""The interactive path: continuous batching on the batch engine's weights and radix KV cache.

Split as vLLM v1 splits it: `request` (what a request is and produces), `scheduler` (the
requests' states, and which advance: a plain step plan), `backend` (what the loop needs of the
engine, declared), `batch` (the running batch's KV), `next_token` (choosing tokens), `loop` (the
engine thread: schedule -> execute -> update). The decode step itself is the
batch engine's (aisql.engine.decoding.decode).
"""

from aisql.engine.continuous.loop import ServingEngine, ServingStats
from aisql.engine.continuous.request import FinishEvent, RequestHandle, ServeRequest, Sink, TokenEvent

__all__ = ["FinishEvent", "RequestHandle", "ServeRequest", "ServingEngine", "ServingStats", "Sink", "TokenEvent"]
