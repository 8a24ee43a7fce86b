"""The SSE writer never lets a blocked value out, however the engine splits it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from engine.serving.protocol import DeltaEvent
from filters import FilterConfig, FilterContext, FilterPipeline
from gateway.response_shape import ResponseShape
from gateway.stream_events import StreamChunk
from gateway.stream_writer import StreamWriter

CARD = "6222 0200 0000 0007"  # UnionPay-shaped, Luhn-valid
POLICY = """
version = 1
default_action = "flag"
on_error = "block"
[actions]
payment_card = "{action}"
"""


def pipeline(tmp_path: Path, action: str) -> FilterPipeline:
    policy = tmp_path / f"{action}.toml"
    policy.write_text(POLICY.format(action=action))
    return FilterPipeline.from_config(FilterConfig(policy_file=str(policy)), tmp_path)


SHAPE = ResponseShape(is_chat=True, model="demo-chat")
FCTX = FilterContext(roles=("analyst",), model="demo-chat")


def pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def as_json(chunk: StreamChunk) -> dict[str, Any]:
    """The chunk as its SSE event's JSON."""
    return dict(json.loads(msgspec.json.encode(chunk)))


def sent_text(chunks: list[StreamChunk]) -> str:
    out = []
    for chunk in chunks:
        payload = as_json(chunk)
        for choice in payload.get("choices", []):
            out.append(choice["delta"].get("content") or "")
    return "".join(out)


@pytest.mark.anyio
@pytest.mark.parametrize("size", [1, 2, 3, 5, 7])
async def test_blocked_card_split_across_deltas_leaks_no_digit(tmp_path: Path, size: int) -> None:
    writer = StreamWriter(SHAPE, pipeline(tmp_path, "block"), FCTX)
    text = "Your card is " + CARD + " and that is all."
    chunks = writer.start()
    for i, piece in enumerate(pieces(text, size)):
        chunks += writer.add(DeltaEvent(index=0, text=piece, token_ids=[i], num_output_tokens=i + 1))
        if writer.blocked:
            break
    chunks += writer.finish()
    out = sent_text(chunks)
    assert writer.blocked
    assert not any(ch.isdigit() for ch in out), out
    finish = as_json(chunks[-1])["choices"][0]["finish_reason"]
    assert finish == "content_filter"
    error = writer.filter_error()
    assert error.completes and error.error.code == "content_policy_violation"
    assert [f.type for f in writer.findings] == ["payment_card"]


@pytest.mark.anyio
async def test_masked_card_streams_through_masked(tmp_path: Path) -> None:
    writer = StreamWriter(SHAPE, pipeline(tmp_path, "mask"), FCTX)
    text = "card " + CARD + " ok"
    chunks: list[StreamChunk] = []
    for i, piece in enumerate(pieces(text, 3)):
        last = i == len(pieces(text, 3)) - 1
        chunks += writer.add(
            DeltaEvent(
                index=0,
                text=piece,
                token_ids=[i],
                num_output_tokens=i + 1,
                finish_reason="stop" if last else None,
            )
        )
    out = sent_text(chunks)
    assert not writer.blocked
    assert CARD not in out and "0200 0000" not in out
    assert out.startswith("card 6222") and out.endswith("0007 ok")
    assert writer.usage().completion_tokens == len(pieces(text, 3))


@pytest.mark.anyio
@pytest.mark.parametrize(
    "evasive",
    [
        "6222 – 0200 – 0000 – 0007",  # en dashes
        "6222.0200\u034f0000/0007",  # mixed separators and a combining grapheme joiner
        "".join(chr(0x0660 + int(d)) if d.isdigit() else d for d in CARD),  # Arabic-Indic digits
    ],
)
async def test_evasive_card_in_streamed_output_is_blocked(tmp_path: Path, evasive: str) -> None:
    """Issue 18: streamed output with a card the old filter did not recognise."""
    writer = StreamWriter(SHAPE, pipeline(tmp_path, "block"), FCTX)
    chunks = writer.start()
    for i, piece in enumerate(pieces("Your card is " + evasive + " and that is all.", 3)):
        chunks += writer.add(DeltaEvent(index=0, text=piece, token_ids=[i], num_output_tokens=i + 1))
        if writer.blocked:
            break
    chunks += writer.finish()
    assert writer.blocked
    assert "0200" not in sent_text(chunks) and "0007" not in sent_text(chunks)
    assert [f.type for f in writer.findings] == ["payment_card"]


@pytest.mark.anyio
async def test_logprobs_never_spell_out_a_masked_value(tmp_path: Path) -> None:
    from engine.serving.protocol import LogprobEntry

    shape = msgspec.structs.replace(SHAPE, wants_logprobs=True)
    writer = StreamWriter(shape, pipeline(tmp_path, "mask"), FCTX)
    text = "ok " * 120 + "card " + CARD + " done"
    parts = pieces(text, 2)
    chunks: list[StreamChunk] = []
    for i, piece in enumerate(parts):
        lp = [LogprobEntry(token_id=i, token=piece, logprob=-0.5, top=[(piece, -0.5)])]
        last = i == len(parts) - 1
        chunks += writer.add(
            DeltaEvent(
                index=0,
                text=piece,
                token_ids=[i],
                num_output_tokens=i + 1,
                logprobs=lp,
                finish_reason="stop" if last else None,
            )
        )
    spelled = "".join(
        entry["token"]
        for chunk in chunks
        for choice in as_json(chunk).get("choices", [])
        for entry in ((choice.get("logprobs") or {}).get("content") or [])
    )
    assert "0200" not in spelled and "0000" not in spelled
    assert spelled and text.startswith(spelled)  # what does go out is the unchanged prefix


@pytest.mark.anyio
@pytest.mark.parametrize("size", [1, 4, 9])
async def test_tool_calls_stream_as_openai_deltas_after_the_filter(tmp_path: Path, size: int) -> None:
    """Content, then the call's head (id, name), then argument pieces; a card in the arguments
    is masked before the parser sees it, and the choice finishes for ``tool_calls``."""
    shape = ResponseShape(is_chat=True, model="demo-chat", tool_syntax="hermes")
    writer = StreamWriter(shape, pipeline(tmp_path, "redact"), FCTX)
    text = 'Paying. <tool_call>\n{"name": "pay", "arguments": {"card": "' + CARD + '"}}\n</tool_call>'
    chunks = writer.start()
    parts = pieces(text, size)
    for i, piece in enumerate(parts):
        last = i == len(parts) - 1
        event = DeltaEvent(
            index=0,
            text=piece,
            token_ids=[i],
            num_output_tokens=i + 1,
            finish_reason="stop" if last else None,
        )
        chunks += writer.add(event)
    deltas = [as_json(c)["choices"][0] for c in chunks]
    calls = [d["delta"]["tool_calls"][0] for d in deltas if "tool_calls" in d["delta"]]
    assert sent_text(chunks) == "Paying. "
    assert calls[0] == {
        "index": 0,
        "id": calls[0]["id"],
        "type": "function",
        "function": {"name": "pay", "arguments": ""},
    }
    assert calls[0]["id"].startswith("call_") and all(set(c) == {"index", "function"} for c in calls[1:])
    arguments = "".join(c["function"]["arguments"] for c in calls)
    assert json.loads(arguments) == {"card": "[REDACTED:PAYMENT_CARD]"}
    assert deltas[-1]["finish_reason"] == "tool_calls"
