"""The engine's side of one gateway link (``engine.serving.protocol``): many streams, one socket.

Each ``LinkOpen`` starts a task that reads the backend's ``generate`` (one list of deltas per
step, merged when the task fell behind) and hands each list to the session. The session sends
everything handed to it since its last send as one message::

    backend step ──▶ every stream task wakes, puts its frame ──▶ the writer wakes after them
        ──▶ one msgpack array [[stream, frame], ...] ──▶ one WebSocket message (one write)

The writer wakes once per step, after the stream tasks that step woke (the event loop runs ready
callbacks in order, and the backend wakes every stream of a step in one callback), so a step costs
one encode and one write for the whole link, not one per stream. While the socket is full (the
gateway reads slowly) the writer waits in ``send`` and frames collect for its next message.

A ``LinkAbort`` cancels the stream's task, which aborts the request in the backend; the link
closing does that for every stream on it, so a gateway that died frees its KV blocks at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

import msgspec

from engine.core.outputs import StreamDelta
from engine.errors import EngineError
from engine.serving.protocol import Counted, ErrorEvent, GenerateRequest, LinkAbort, LinkCount, LinkOpen

if TYPE_CHECKING:
    from engine.serving.backend import EngineBackend

__all__ = ["LinkSession"]

log = logging.getLogger("strongroom.engine")

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(LinkOpen | LinkCount | LinkAbort)

_Payload = list[StreamDelta] | ErrorEvent | Counted
_Entry = tuple[int, _Payload]
Counter = Callable[[GenerateRequest], Awaitable[int]]
"""The server's token count (long prompts off the event loop)."""


class LinkSession:
    """One gateway connection's streams; ``run`` serves it until the gateway goes away."""

    def __init__(
        self, backend: EngineBackend, send: Callable[[bytes], Awaitable[None]], count: Counter | None = None
    ) -> None:
        """``count``: how ``LinkCount`` is answered (default: the backend's, on the event loop)."""
        self._backend = backend
        self._send = send
        self._count = count
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._out: list[_Entry] = []
        self._has_out = asyncio.Event()

    @property
    def num_streams(self) -> int:
        return len(self._tasks)

    async def run(self, messages: AsyncIterator[bytes]) -> None:
        """Serve the messages the gateway sends until it closes the link; then abort what is open."""
        writer = asyncio.create_task(self._write_loop(), name="engine-link-writer")
        try:
            async for data in messages:
                try:
                    message = _decoder.decode(data)
                except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
                    log.warning("closing an engine link that sent an unreadable message: %s", exc)
                    return
                if isinstance(message, LinkOpen):
                    self._open(message.stream, self._serve(message.stream, message.request))
                elif isinstance(message, LinkCount):
                    self._open(message.stream, self._answer_count(message.stream, message.request))
                else:
                    self._abort(message.stream)
        finally:
            tasks = list(self._tasks.values())
            for task in tasks:
                task.cancel()
            writer.cancel()
            # Shielded: the handler itself may be cancelled (server shutdown), and these aborts
            # are what frees the gateway's KV blocks.
            await asyncio.shield(asyncio.gather(*tasks, writer, return_exceptions=True))

    def _open(self, sid: int, work: Coroutine[Any, Any, None]) -> None:
        if sid in self._tasks:
            work.close()
            self._put(sid, ErrorEvent(code="invalid_request", message=f"stream {sid} is already open"))
            return
        self._tasks[sid] = asyncio.create_task(work)

    async def _answer_count(self, sid: int, request: GenerateRequest) -> None:
        try:
            if self._count is not None:
                num_tokens = await self._count(request)
            else:
                num_tokens = self._backend.count_tokens(request)
            self._put(sid, Counted(num_tokens=num_tokens))
        except EngineError as exc:
            self._put(sid, ErrorEvent(code=exc.code, message=exc.message, param=exc.param))
        finally:
            if self._tasks.get(sid) is asyncio.current_task():
                del self._tasks[sid]

    def _abort(self, sid: int) -> None:
        task = self._tasks.pop(sid, None)
        if task is not None:
            task.cancel()

    async def _serve(self, sid: int, request: GenerateRequest) -> None:
        """Frames of one generation until every completion finished, an error, or a cancel."""
        open_indices = set(range(request.params.n))
        stream = self._backend.generate(request)
        try:
            async for batch in stream:
                for delta in batch:
                    if delta.finish_reason is not None:
                        open_indices.discard(delta.index)
                self._put(sid, batch)
            if open_indices:
                self._put(sid, ErrorEvent(code="engine_error", message="the engine ended the stream early"))
        except EngineError as exc:
            self._put(sid, ErrorEvent(code=exc.code, message=exc.message, param=exc.param))
            open_indices.clear()  # the backend ended the request itself
        except Exception:
            log.exception("engine link stream failed")
            self._put(sid, ErrorEvent(code="engine_error", message="the engine failed to serve the request"))
        finally:
            if self._tasks.get(sid) is asyncio.current_task():
                del self._tasks[sid]
            if open_indices:
                # Cancelled (LinkAbort, link gone) or failed: free the sequence's blocks now.
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._backend.abort(request.request_id))

    def _put(self, sid: int, payload: _Payload) -> None:
        self._out.append((sid, payload))
        self._has_out.set()

    async def _write_loop(self) -> None:
        while True:
            await self._has_out.wait()
            self._has_out.clear()
            out, self._out = self._out, []
            await self._send(_encoder.encode(out))
