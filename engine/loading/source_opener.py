"""How a rank that rank 0 spawns gets its models' sources without being handed a data key.

Rank 0 starts its other ranks with pickled arguments. A plain checkpoint directory travels as a
path; a sealed source holds the unwrapped data key, so it must not travel at all. Rank 0 passes a
``SourceOpener`` instead: a small picklable callable (a frozen struct of plain settings, no secret
values: passphrases and PINs stay in environment variables, read when the provider opens) that
each rank calls to open the models itself, through the key provider, as a rank started with
``strongroom engine-rank`` does. The engine knows only this seam; ``strongroom`` implements it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from engine.loading.model_source import ModelSource

if TYPE_CHECKING:
    from engine.config import EngineConfig

__all__ = ["OpenedSources", "SourceOpener"]


class OpenedSources(NamedTuple):
    sources: dict[str, ModelSource]
    """Model name -> its source, opened in this process."""
    failed: dict[str, str]
    """Model name -> why it did not open here (bad key, tampered file, refused plaintext)."""
    key_operations: list[Any]
    """msgpack values of ``engine.serving.protocol.KeyOperationEvent``: the key operations of
    opening them, each naming this process; rank 0 reports them with its own."""


class SourceOpener(Protocol):
    """Opens ``config.models`` in the calling process. Must pickle without any key material."""

    def __call__(self, config: EngineConfig) -> OpenedSources: ...
