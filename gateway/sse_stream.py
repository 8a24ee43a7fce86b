"""The HTTP response of a streamed answer: its server-sent events as ASGI body messages.

litestar's ``Stream`` runs each response in an anyio task group (one task sends the body, the
request's task listens for a disconnect and cancels the group) and ends the body with a message
of its own, one more socket write after ``[DONE]``. Per streamed request that was a tenth of the
gateway's CPU at one token (bench/BENCHMARKS.md). ``SseStream`` answers the same way with less:

- the body is sent from the request's own task, and one plain asyncio task waits for the
  client to leave; if it leaves while the body is still being sent, that task cancels the
  request's task, which closes the events (the engine request is aborted, the quota settled,
  the outcome audited: ``gateway.inference``), as the task group did;
- the write that carries ``data: [DONE]``, always a stream's last event (``gateway.sse``), also
  ends the chunked body, so the end costs no write of its own. A stream that ends without it (an
  error the answer is not whole after) ends with an empty last message, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncGenerator, Iterable
from typing import Any

from litestar import Request
from litestar.background_tasks import BackgroundTask, BackgroundTasks
from litestar.datastructures.cookie import Cookie
from litestar.enums import MediaType
from litestar.response import Stream
from litestar.response.base import ASGIResponse
from litestar.response.streaming import ASGIStreamingResponse
from litestar.types import Receive, Send, TypeEncodersMap

from gateway.sse import DONE

__all__ = ["SseStream"]

_EVENT_STREAM = "text/event-stream"


class SseStream(Stream):
    """``Stream(events, media_type="text/event-stream", headers=headers)``, sent as above."""

    def __init__(self, events: AsyncGenerator[bytes, None], *, headers: dict[str, str]) -> None:
        super().__init__(events, media_type=_EVENT_STREAM, headers=headers)

    def to_asgi_response(
        self,
        app: Any,
        request: Request[Any, Any, Any],
        *,
        background: BackgroundTask | BackgroundTasks | None = None,
        cookies: Iterable[Cookie] | None = None,
        encoded_headers: Iterable[tuple[bytes, bytes]] | None = None,
        headers: dict[str, str] | None = None,
        is_head_response: bool = False,
        media_type: MediaType | str | None = None,
        status_code: int | None = None,
        type_encoders: TypeEncodersMap | None = None,
    ) -> ASGIResponse:
        return _SseResponse(
            background=self.background or background,
            content_length=0,
            cookies=self.cookies if cookies is None else itertools.chain(self.cookies, cookies),
            encoded_headers=encoded_headers,
            encoding=self.encoding,
            headers={**headers, **self.headers} if headers is not None else self.headers,
            is_head_response=is_head_response,
            iterator=self.iterator,  # type: ignore[arg-type]
            media_type=_EVENT_STREAM,
            status_code=self.status_code or status_code,
        )


class _SseResponse(ASGIStreamingResponse):
    __slots__ = ()

    async def send_body(self, send: Send, receive: Receive) -> None:
        task = asyncio.current_task()
        if task is None:  # pragma: no cover - ASGI servers run apps in tasks
            raise RuntimeError("a streamed response needs a running task")
        is_sending = True
        left = False

        def on_leave(listener: asyncio.Future[None]) -> None:
            nonlocal left
            if is_sending and not listener.cancelled() and listener.exception() is None:
                left = True
                task.cancel()

        listener = asyncio.ensure_future(_disconnect(receive))
        listener.add_done_callback(on_leave)
        events: AsyncGenerator[bytes, None] = self.iterator  # type: ignore[assignment]
        try:
            # Closed however this ends: cancelled or failing in ``send``, they are still open at
            # their last yield, and closing them runs their clean-up now, not at collection.
            async with contextlib.aclosing(events):
                ended = False
                async for data in events:
                    ended = data.endswith(DONE)
                    await send({"type": "http.response.body", "body": data, "more_body": not ended})
                is_sending = False
                if not ended:
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not left or task.uncancel() > 0:
                raise
            # The client left and the events are closed: nothing more is owed.
        finally:
            is_sending = False
            listener.cancel()


async def _disconnect(receive: Receive) -> None:
    """Return once the server says the client left (or the response is complete)."""
    while (await receive())["type"] != "http.disconnect":
        pass
