"""OpenAI's ``/v1/embeddings`` request and response bodies.

``encoding_format: "base64"`` sends each vector as the base64 of its float32 values in
little-endian order, as OpenAI does (the official SDK asks for it by default and decodes it).
"""

from __future__ import annotations

import base64
import struct
from typing import Any, Literal

import msgspec

__all__ = ["EmbeddingData", "EmbeddingList", "EmbeddingRequest", "EmbeddingUsage", "encoded"]


class EmbeddingRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    model: str
    input: str | list[Any]
    """A string, a list of strings, a list of token ids, or a list of token-id lists (msgspec allows
    one array type in a union, so the shape is checked by the embedding service)."""
    dimensions: int | None = None
    encoding_format: Literal["float", "base64"] = "float"
    user: str | None = None

    def __repr__(self) -> str:
        size = 1 if isinstance(self.input, str) else len(self.input)
        return f"EmbeddingRequest(model={self.model!r}, inputs={size})"


class EmbeddingData(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    embedding: list[float] | str
    object: str = "embedding"


class EmbeddingUsage(msgspec.Struct, frozen=True, kw_only=True):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(msgspec.Struct, frozen=True, kw_only=True):
    data: list[EmbeddingData]
    model: str
    usage: EmbeddingUsage
    object: str = "list"


def encoded(vector: list[float], encoding_format: str) -> list[float] | str:
    """The vector as the client asked for it."""
    if encoding_format == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
    return vector
