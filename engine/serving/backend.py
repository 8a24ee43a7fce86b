"""What the engine server needs from an engine: the real ``AsyncEngine`` or the benchmark's ``StubEngine``.

Both satisfy ``EngineBackend``; mypy holds them to it where ``strongroom.engine_process`` builds
one for the server. A request crosses this seam whole, as the ``GenerateRequest`` the gateway
sent; the backend turns its prompt (text, token ids or chat messages) into tokens itself.

``generate`` yields one list of deltas per engine step, at most one per completion index (a
consumer that fell behind gets the steps it missed merged into one list): that list is one
frame on the wire (``engine.serving.frames``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Protocol

from engine.core.outputs import EmbeddingOutput, ModelInfo, StreamDelta
from engine.serving.protocol import EmbedRequest, GenerateRequest, KeyOperationEvent

__all__ = ["EngineBackend"]


class EngineBackend(Protocol):
    async def start(self) -> None:
        """Load every model; raises ``ModelLoadError`` when none can serve."""

    async def shutdown(self) -> None:
        """Stop; open streams end with finish_reason "abort"."""

    @property
    def failed_models(self) -> Mapping[str, str]:
        """Models left out of service at start-up, with the reason."""
        ...

    @property
    def rank_key_operations(self) -> list[KeyOperationEvent]:
        """Key operations the instance's other ranks carried out at start-up (each rank started
        with ``strongroom engine-rank`` unwraps a sealed model's data key itself)."""
        ...

    def model_infos(self) -> list[ModelInfo]:
        """The models in service; raises ``EngineUnavailableError`` before ``start``."""
        ...

    def count_tokens(self, request: GenerateRequest) -> int:
        """The prompt tokens ``generate`` would charge for ``request``; nothing is queued."""
        ...

    def generate(self, request: GenerateRequest) -> AsyncIterator[list[StreamDelta]]:
        """Deltas per step until every completion finished; errors in the request raise at the first
        ``__anext__``. Leaving the iteration early aborts the request."""
        ...

    def count_embedding_tokens(self, request: EmbedRequest) -> int:
        """The input tokens ``embed`` will take (and charge) for ``request``; nothing is queued."""
        ...

    async def embed(self, request: EmbedRequest) -> EmbeddingOutput:
        """Every input's vector once all are computed; cancelling the call aborts the request."""
        ...

    async def abort(self, request_id: str) -> None:
        """Free the request's blocks now; its stream ends with finish_reason "abort"."""

    def stats(self) -> Mapping[str, int | float]:
        """Counters for ``EngineInfo.stats``; answered without waiting for a step."""
        ...
