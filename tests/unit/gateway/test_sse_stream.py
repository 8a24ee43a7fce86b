"""SseStream over ASGI: ``[DONE]`` ends the body in its own message; a client that leaves
mid-stream cancels it and closes its events at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import pytest
from litestar import Litestar, post

from gateway.sse import DONE
from gateway.sse_stream import SseStream

pytestmark = pytest.mark.anyio

Events = Callable[[], AsyncGenerator[bytes, None]]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _app(events: Events) -> Litestar:
    @post("/stream", status_code=200)
    async def stream() -> SseStream:
        return SseStream(events(), headers={"cache-control": "no-cache"})

    return Litestar([stream])


async def _call(app: Litestar, receive: Callable[[], Awaitable[dict[str, Any]]]) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/stream",
        "raw_path": b"/stream",
        "root_path": "",
        "query_string": b"",
        "headers": [],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    await app(scope, receive, send)  # type: ignore[arg-type]
    return sent


def _receive_until(left: asyncio.Event) -> Callable[[], Awaitable[dict[str, Any]]]:
    async def receive() -> dict[str, Any]:
        await left.wait()
        return {"type": "http.disconnect"}

    return receive


async def test_done_ends_the_body_in_the_same_message() -> None:
    async def events() -> AsyncGenerator[bytes, None]:
        yield b"data: {}\n\n"
        yield b"data: {}\n\n" + DONE

    sent = await _call(_app(events), _receive_until(asyncio.Event()))
    assert sent[0]["type"] == "http.response.start"
    assert (b"content-type", b"text/event-stream; charset=utf-8") in sent[0]["headers"]
    assert [(m["body"], m["more_body"]) for m in sent[1:]] == [
        (b"data: {}\n\n", True),
        (b"data: {}\n\n" + DONE, False),
    ]


async def test_a_stream_without_done_ends_with_an_empty_message() -> None:
    async def events() -> AsyncGenerator[bytes, None]:
        yield b'data: {"error": {}}\n\n'

    sent = await _call(_app(events), _receive_until(asyncio.Event()))
    assert [(m["body"], m["more_body"]) for m in sent[1:]] == [
        (b'data: {"error": {}}\n\n', True),
        (b"", False),
    ]


async def test_a_client_that_leaves_mid_stream_closes_the_events_at_once() -> None:
    left, closed = asyncio.Event(), asyncio.Event()

    async def events() -> AsyncGenerator[bytes, None]:
        try:
            yield b"data: {}\n\n"
            left.set()  # the client goes while the engine is still generating
            await asyncio.sleep(3600)
            yield DONE
        finally:
            closed.set()

    sent = await asyncio.wait_for(_call(_app(events), _receive_until(left)), 5)
    assert closed.is_set()
    assert [m["body"] for m in sent[1:]] == [b"data: {}\n\n"]


async def test_the_end_of_the_response_cancels_nothing() -> None:
    done = asyncio.Event()

    async def events() -> AsyncGenerator[bytes, None]:
        yield DONE
        done.set()  # the server reports the finished response as a disconnect

    async def receive() -> dict[str, Any]:
        await done.wait()
        return {"type": "http.disconnect"}

    sent = await _call(_app(events), receive)
    assert [(m["body"], m["more_body"]) for m in sent[1:]] == [(DONE, False)]
    await asyncio.sleep(0)
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_a_send_that_fails_closes_the_events_at_once() -> None:
    closed = asyncio.Event()

    async def events() -> AsyncGenerator[bytes, None]:
        try:
            yield b"data: {}\n\n"
            yield DONE
        finally:
            closed.set()

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            raise OSError("the socket broke")

    response = SseStream(events(), headers={}).to_asgi_response(None, None)  # type: ignore[arg-type]
    with pytest.raises(OSError, match="socket broke"):
        await response.send_body(send, _receive_until(asyncio.Event()))  # type: ignore[arg-type]
    assert closed.is_set()
