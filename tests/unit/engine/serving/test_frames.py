"""engine.serving.frames: what the engine writes is what the gateway reads, however it is split."""

from __future__ import annotations

import msgspec
import pytest

from engine.core.outputs import StreamDelta, TokenLogprob
from engine.serving.frames import MAX_FRAME_BYTES, FrameBuffer, coalesced, decode_frame, encode_frame
from engine.serving.protocol import DeltaEvent, ErrorEvent, LogprobEntry


def delta(
    index: int, text: str, n: int, finish: str | None = None, logprob: float | None = None
) -> StreamDelta:
    return StreamDelta(
        index=index,
        text=text,
        token_ids=[n],
        finish_reason=finish,
        num_prompt_tokens=7,
        num_output_tokens=n,
        logprobs=None
        if logprob is None
        else [TokenLogprob(token_id=n, token=text, logprob=logprob, top=[("x", -1.0)])],
    )


def test_deltas_of_one_index_merge_in_order_and_others_keep_their_place() -> None:
    merged = coalesced(
        [delta(0, " a", 1, logprob=-0.5), delta(1, " b", 1), delta(0, " c", 2, "stop", logprob=-0.25)]
    )
    assert [(d.index, d.text, d.token_ids, d.finish_reason, d.num_output_tokens) for d in merged] == [
        (0, " a c", [1, 2], "stop", 2),
        (1, " b", [1], None, 1),
    ]
    assert [lp.logprob for lp in merged[0].logprobs or []] == [-0.5, -0.25]
    assert merged[1].logprobs is None
    one_each = [delta(0, " a", 1), delta(1, " b", 1)]
    assert coalesced(one_each) is one_each  # nothing to merge: no new objects


def test_the_engines_deltas_read_back_as_the_gateways_events_field_for_field() -> None:
    sent = [delta(0, " wörld", 3, "length", logprob=-0.5), delta(1, "", 0)]
    [payload] = FrameBuffer().feed(encode_frame(sent))
    got = decode_frame(payload)
    assert isinstance(got, list)
    assert got == [
        DeltaEvent(
            index=0,
            text=" wörld",
            token_ids=[3],
            finish_reason="length",
            num_prompt_tokens=7,
            num_output_tokens=3,
            logprobs=[LogprobEntry(token_id=3, token=" wörld", logprob=-0.5, top=[("x", -1.0)])],
        ),
        DeltaEvent(index=1, text="", token_ids=[0], num_prompt_tokens=7, num_output_tokens=0),
    ]
    # Every field the engine sends has a place in the event: none is dropped on the way.
    assert set(StreamDelta.__struct_fields__) == set(DeltaEvent.__struct_fields__)
    assert set(TokenLogprob.__struct_fields__) == set(LogprobEntry.__struct_fields__)


def test_frames_split_at_any_byte_come_out_whole_and_in_order() -> None:
    error = ErrorEvent(code="engine_error", message="boom")
    stream = encode_frame([delta(0, " a", 1)]) + encode_frame([delta(0, " b", 2)]) + encode_frame(error)
    for size in (1, 2, 3, 5, len(stream)):
        frames = FrameBuffer()
        payloads = [p for i in range(0, len(stream), size) for p in frames.feed(stream[i : i + size])]
        decoded = [decode_frame(p) for p in payloads]
        assert [[e.text for e in f] if isinstance(f, list) else f for f in decoded] == [[" a"], [" b"], error]
        assert frames.is_empty


def test_a_garbled_length_or_payload_is_an_error_not_a_wait() -> None:
    with pytest.raises(ValueError, match="frame of"):
        FrameBuffer().feed((MAX_FRAME_BYTES + 1).to_bytes(4, "big"))
    with pytest.raises(msgspec.DecodeError):
        decode_frame(msgspec.msgpack.encode({"not": "a frame"}))
