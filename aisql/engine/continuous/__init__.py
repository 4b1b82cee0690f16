"""The interactive path: continuous batching on the batch engine's weights and radix KV cache.

Split as vLLM v1 splits it: `request` (what a request is and produces), `scheduler` (the
requests' states, and which advance: a plain step plan), `backend` (what the loop needs of the
engine, declared), `sequence_kv` (a request's own KV buffers), `mixed_pass` (decode rows and
prompt chunks in one forward pass), `batch` (the padded batch KV of the separate-pass path),
`next_token` (choosing tokens), `loop` (the engine thread: schedule -> execute -> update).
"""

from aisql.engine.continuous.loop import ServingEngine, ServingStats
from aisql.engine.continuous.request import FinishEvent, RequestHandle, ServeRequest, Sink, TokenEvent

__all__ = ["FinishEvent", "RequestHandle", "ServeRequest", "ServingEngine", "ServingStats", "Sink", "TokenEvent"]
