"""Frames of a generation's stream (``engine.serving.protocol``): built by the engine, split and read
by the gateway.

A frame is a 4-byte big-endian length and that many bytes of msgpack: a list of deltas, at most one
per completion index, or one ``ErrorEvent``. Deltas of one index that reach a frame together (the
steps a slow reader missed) are merged into one first, so everything downstream costs per frame,
not per token. The engine encodes its ``StreamDelta`` structs as they are; the gateway decodes the
same bytes as ``DeltaEvent``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import msgspec

from engine.core.outputs import StreamDelta
from engine.serving.protocol import DeltaEvent, DeltaFrame, ErrorEvent

__all__ = ["FrameBuffer", "coalesced", "decode_frame", "encode_frame"]

_PREFIX = 4
MAX_FRAME_BYTES = 64 << 20
"""A length beyond this is a garbled stream, not a frame."""

_Delta = TypeVar("_Delta", StreamDelta, DeltaEvent)
"""The engine's delta or the gateway's copy of it: the same fields (a test holds them equal)."""

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(DeltaFrame | ErrorEvent)


def coalesced(deltas: list[_Delta]) -> list[_Delta]:
    """``deltas`` with those of one completion index merged into one, in order of first arrival."""
    if len(deltas) < 2:
        return deltas
    first = deltas[0].index
    if all([d.index == first for d in deltas]):  # one completion (n = 1): no grouping to do
        return [_merged(deltas)]
    by_index: dict[int, list[_Delta]] = {}
    for delta in deltas:
        by_index.setdefault(delta.index, []).append(delta)
    if len(by_index) == len(deltas):
        return deltas
    return [group[0] if len(group) == 1 else _merged(group) for group in by_index.values()]


def _merged(group: list[_Delta]) -> _Delta:
    last = group[-1]
    logprobs: list[Any] | None = None
    parts = [d.logprobs for d in group if d.logprobs is not None]
    if parts:
        logprobs = [lp for part in parts for lp in part]
    return type(last)(
        index=last.index,
        text="".join([d.text for d in group]),
        token_ids=[t for d in group for t in d.token_ids],
        finish_reason=last.finish_reason,
        num_prompt_tokens=last.num_prompt_tokens,
        num_output_tokens=last.num_output_tokens,
        logprobs=logprobs,
    )


def encode_frame(payload: Sequence[StreamDelta] | ErrorEvent) -> bytes:
    """One frame: the deltas of one request since its last frame, or the error that ends it."""
    buffer = bytearray(_PREFIX)
    _encoder.encode_into(payload, buffer, _PREFIX)
    buffer[:_PREFIX] = (len(buffer) - _PREFIX).to_bytes(_PREFIX, "big")
    return bytes(buffer)


def decode_frame(payload: bytes) -> list[DeltaEvent] | ErrorEvent:
    """One frame's payload (without its length); raises ``msgspec.DecodeError`` (a ValueError)."""
    return _decoder.decode(payload)


class FrameBuffer:
    """Bytes of a frame stream in, whole frame payloads out, however the bytes were split."""

    def __init__(self) -> None:
        self._pending = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """The payloads of every frame ``data`` completed; the rest waits for more bytes."""
        pending = self._pending
        if (
            not pending
            and len(data) >= _PREFIX
            and len(data) == _PREFIX + int.from_bytes(data[:_PREFIX], "big")
        ):
            return [data[_PREFIX:]]  # the usual case: one chunk is one whole frame
        pending += data
        payloads = []
        start = 0
        while len(pending) - start >= _PREFIX:
            size = int.from_bytes(pending[start : start + _PREFIX], "big")
            if size > MAX_FRAME_BYTES:
                raise ValueError(f"the engine sent a frame of {size} bytes")
            end = start + _PREFIX + size
            if len(pending) < end:
                break
            payloads.append(bytes(pending[start + _PREFIX : end]))
            start = end
        del pending[:start]
        return payloads

    @property
    def is_empty(self) -> bool:
        """True when no partial frame is waiting for its rest."""
        return not self._pending
