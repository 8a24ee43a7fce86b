"""What a streamed answer yields, whatever carries it: chunks, and maybe one error at the end.

``InferenceService.open_stream`` yields typed items; ``gateway.sse`` writes them as server-sent
events (``[DONE]`` once the stream ends without an error, or after an error that ``completes``),
``gateway.grpc_api`` as protobuf messages and a final status.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.errors import GatewayError
from gateway.openai_types import ChatCompletionChunk, CompletionChunk

__all__ = ["StreamChunk", "StreamError", "StreamEvent"]

StreamChunk = ChatCompletionChunk | CompletionChunk


@dataclass(frozen=True)
class StreamError:
    """The stream's last item: the answer ends with this error."""

    error: GatewayError
    completes: bool = False
    """The answer is whole and on the record (a choice the response filters stopped): over SSE
    ``[DONE]`` still follows. False: the stream broke (engine failure, audit unavailable)."""


StreamEvent = StreamChunk | StreamError
