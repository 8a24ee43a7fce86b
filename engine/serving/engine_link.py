"""The gateway's side of one engine link (``engine.serving.protocol``): every stream, one socket.

One ``EngineLink`` per engine client (one per gateway worker and engine) carries all of that
worker's generations. The engine sends one message per step; the link splits it where it lands,
in ``data_received``, with no reader task between the socket and the streams::

    socket bytes ─▶ WebSocket frames (websockets' sans-I/O protocol) ─▶ [[stream, raw frame], ...]
        ─▶ each LinkStream's pending list ─▶ its reader decodes what it takes, merged per index

Work is per socket read and per reader wake-up, not per frame: a read's messages are split into
each stream's pending list first, then each stream that got frames is counted against its bound
and woken once. A stream's frames stay undecoded until its reader takes them, so a reader that
fell behind decodes its backlog in one call (the raw frames joined into one msgpack array) and
hands one merged frame downstream.

Backpressure: the link never waits for a stream's reader, so a slow client holds up no other
stream. Instead each stream's undelivered bytes are bounded by ``max_stream_bytes`` (checked
after each socket read, so it may overshoot by one read); a stream past it fails with
``RequestAbortedError`` and is aborted in the engine. Below the bound the
backlog costs one merge, not one downstream pass per frame.

The link ending (EOF, reset, a close from the engine, ``reset`` after missed heartbeats) fails
every stream on it at once with ``EngineUnavailableError``; ``EngineClient`` opens a new link
for the next generation.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from typing import cast

import msgspec
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.protocol import State
from websockets.uri import parse_uri

from engine.errors import (
    EngineError,
    EngineOverloadedError,
    EngineUnavailableError,
    InvalidRequestError,
    ModelLoadError,
    PromptTooLongError,
    RequestAbortedError,
    UnknownModelError,
)
from engine.serving.frames import coalesced
from engine.serving.protocol import (
    LINK_PATH,
    Counted,
    DeltaEvent,
    DeltaFrame,
    ErrorEvent,
    GenerateRequest,
    LinkAbort,
    LinkCount,
    LinkOpen,
)

__all__ = ["EngineLink", "LinkStream", "error_of", "time_out"]

_BY_CODE: dict[str, type[EngineError]] = {
    cls.code: cls
    for cls in (
        InvalidRequestError,
        PromptTooLongError,
        UnknownModelError,
        EngineOverloadedError,
        EngineUnavailableError,
        ModelLoadError,
        RequestAbortedError,
    )
}
_encoder = msgspec.msgpack.Encoder()
_batch_decoder = msgspec.msgpack.Decoder(list[tuple[int, msgspec.Raw]])
_frame_decoder = msgspec.msgpack.Decoder(DeltaFrame | ErrorEvent | Counted)
_frames_decoder = msgspec.msgpack.Decoder(list[DeltaFrame | ErrorEvent | Counted])
_MAX_MESSAGE_BYTES = 256 << 20
"""A message from the engine larger than this fails the link (the engine splits at far less)."""


def _array_of(raws: list[msgspec.Raw]) -> bytes:
    """``raws`` (each one msgpack value) as one msgpack array, so a backlog is one decode call."""
    n = len(raws)
    if n < 16:
        head = bytes((0x90 | n,))
    elif n < 1 << 16:
        head = b"\xdc" + n.to_bytes(2, "big")
    else:
        head = b"\xdd" + n.to_bytes(4, "big")
    return head + b"".join(raws)


def error_of(event: ErrorEvent) -> EngineError:
    """The engine's error event as the exception it names."""
    return _BY_CODE.get(event.code, EngineError)(event.message, param=event.param)


class LinkStream:
    """One generation on a link: the link puts its raw frames, the reader takes and decodes them."""

    __slots__ = (
        "_deadline",
        "_error",
        "_link",
        "_max_bytes",
        "_open",
        "_timeout_s",
        "_timer",
        "_waiter",
        "num_bytes",
        "pending",
        "sid",
    )

    def __init__(self, link: EngineLink, sid: int, n: int, max_bytes: int, timeout_s: float) -> None:
        self.sid = sid
        self._link = link
        self._open = set(range(n))
        self.pending: list[msgspec.Raw] = []
        """Raw frames the reader has not taken: the link appends a whole socket read's worth (adding
        their sizes to ``num_bytes``), then calls ``settle`` once: one bound check and one wake-up
        per stream per read, not per frame."""
        self.num_bytes = 0
        self._max_bytes = max_bytes
        self._timeout_s = timeout_s
        self._error: EngineError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._deadline = 0.0
        """When the reader's current wait times out (loop time)."""
        self._timer: asyncio.TimerHandle | None = None
        """One timer per stream, not one per wait (a wait per frame): firing before the current
        wait's deadline, it is set again for that deadline (``_on_timer``)."""

    @property
    def is_done(self) -> bool:
        """Every completion finished or the stream failed: the engine sends it nothing more."""
        return not self._open or self._error is not None

    def settle(self) -> bool:
        """Wake the reader for the frames appended to ``pending``; False when they put the stream
        past its bound (it has failed then)."""
        if self.num_bytes > self._max_bytes:
            self.fail(
                RequestAbortedError(f"the stream's reader fell more than {self._max_bytes} bytes behind")
            )
            return False
        self._wake()
        return True

    def fail(self, exc: EngineError) -> None:
        if self._error is None:
            self._error = exc
            self.pending = []
            self.num_bytes = 0
        self._wake()

    async def frames(self) -> AsyncIterator[DeltaFrame]:
        """The engine's frames until every completion finished; several taken at once are merged."""
        while self._open:
            if not self.pending:
                await self._wait()
            pending, self.pending = self.pending, []
            self.num_bytes = 0
            if not pending:
                continue  # woken by a failure: ``_wait`` raised it, or by a settle of nothing
            try:
                if len(pending) == 1:  # a reader that keeps up: one frame per wake-up
                    payloads = [_frame_decoder.decode(pending[0])]
                else:
                    payloads = _frames_decoder.decode(_array_of(pending))
            except msgspec.DecodeError as exc:  # a ValueError: garbled, not a refusal
                self._link.fail_all(f"unreadable frame ({exc})")
                raise self._error or EngineUnavailableError("unreadable frame") from None
            events: list[DeltaEvent] = []
            for payload in payloads:
                if type(payload) is list:
                    events += payload
                elif isinstance(payload, ErrorEvent):
                    self._error = error_of(payload)
                    if events:
                        break  # hand over what came before the error first
                    raise self._error
                else:  # Counted
                    self._link.fail_all("a token count inside a generation's stream")
                    raise self._error or EngineUnavailableError("unexpected count")
            if events:
                for event in events:
                    if event.finish_reason is not None:
                        self._open.discard(event.index)
                yield coalesced(events) if len(pending) > 1 else events
            if self._error is not None:
                raise self._error

    async def answer(self) -> int:
        """A token count's answer (its stream's one frame)."""
        if not self.pending:
            await self._wait()
        try:
            payload = _frame_decoder.decode(self.pending[0])
        except msgspec.DecodeError as exc:
            self._link.fail_all(f"unreadable frame ({exc})")
            raise self._error or EngineUnavailableError("unreadable frame") from None
        self._open.clear()
        if isinstance(payload, ErrorEvent):
            raise error_of(payload)
        if not isinstance(payload, Counted):
            self._link.fail_all("a generation's frame answered a token count")
            raise self._error or EngineUnavailableError("unexpected frame")
        return payload.num_tokens

    async def _wait(self) -> None:
        if self._error is not None:
            raise self._error
        loop = asyncio.get_running_loop()
        self._waiter = waiter = loop.create_future()
        self._deadline = loop.time() + self._timeout_s
        if self._timer is None:
            self._timer = loop.call_at(self._deadline, self._on_timer)
        try:
            await waiter
        except TimeoutError as exc:
            raise EngineUnavailableError(f"engine {self._link.url} failed: TimeoutError: {exc}") from None
        finally:
            self._waiter = None
        if self._error is not None and not self.pending:
            raise self._error

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _on_timer(self) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return  # no wait now: the next one sets the timer again
        loop = asyncio.get_running_loop()
        if loop.time() < self._deadline:
            self._timer = loop.call_at(self._deadline, self._on_timer)
        else:
            time_out(waiter)

    def close(self) -> None:
        """The reader is done with the stream: its timer goes."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def time_out(waiter: asyncio.Future[None]) -> None:
    """The read timeout's timer callback: fail ``waiter`` unless data woke it first."""
    if not waiter.done():
        waiter.set_exception(TimeoutError("the engine sent nothing within the read timeout"))


class EngineLink(asyncio.Protocol):
    """One WebSocket to an engine; ``connect`` opens it, ``open`` starts a stream on it."""

    def __init__(self, url: str, token: str, *, read_timeout_s: float, max_stream_bytes: int) -> None:
        """``url``: the engine's base URL (http or https)."""
        self.url = url
        ws_url = (
            "wss" + url.removeprefix("https") if url.startswith("https") else "ws" + url.removeprefix("http")
        )
        self._ws = ClientProtocol(parse_uri(ws_url + LINK_PATH), max_size=_MAX_MESSAGE_BYTES)
        self._token = token
        self._read_timeout_s = read_timeout_s
        self._max_stream_bytes = max_stream_bytes
        self._streams: dict[int, LinkStream] = {}
        self._next_sid = 0
        self._fragments = bytearray()
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._handshake: asyncio.Future[None] = self._loop.create_future()
        self._is_flush_due = False
        self.error: EngineUnavailableError | None = None
        """Set once the link ended: it carries nothing more."""

    @classmethod
    async def connect(
        cls,
        url: str,
        token: str,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None,
        timeout_s: float,
        read_timeout_s: float,
        max_stream_bytes: int,
    ) -> EngineLink:
        """Connect and complete the WebSocket handshake, or raise (OSError, TimeoutError,
        EngineUnavailableError when the engine refuses the upgrade)."""
        loop = asyncio.get_running_loop()
        link = cls(url, token, read_timeout_s=read_timeout_s, max_stream_bytes=max_stream_bytes)
        async with asyncio.timeout(timeout_s):
            await loop.create_connection(
                lambda: link, host, port, ssl=ssl_context, server_hostname=host if ssl_context else None
            )
            try:
                await link._handshake
            except BaseException:
                link.reset("the handshake did not complete")
                raise
        return link

    @property
    def is_open(self) -> bool:
        return self.error is None

    @property
    def num_streams(self) -> int:
        return len(self._streams)

    def open(self, request: GenerateRequest) -> LinkStream:
        """Start ``request`` on this link; raises ``EngineUnavailableError`` if the link has ended."""
        stream = self._new_stream(request.params.n)
        self._send(_encoder.encode(LinkOpen(stream=stream.sid, request=request)))
        return stream

    async def count(self, request: GenerateRequest) -> int:
        """The prompt tokens ``request`` would have in this engine (nothing is queued)."""
        stream = self._new_stream(1)
        self._send(_encoder.encode(LinkCount(stream=stream.sid, request=request)))
        try:
            return await stream.answer()
        finally:
            stream.close()
            self._streams.pop(stream.sid, None)

    def _new_stream(self, n: int) -> LinkStream:
        if self.error is not None:
            raise self.error
        self._next_sid += 1
        stream = LinkStream(self, self._next_sid, n, self._max_stream_bytes, self._read_timeout_s)
        self._streams[stream.sid] = stream
        return stream

    def close_stream(self, stream: LinkStream) -> None:
        """The reader is done with ``stream``; unless the engine has finished it, abort it there."""
        stream.close()
        if self._streams.pop(stream.sid, None) is not None and not stream.is_done and self.error is None:
            self._send(_encoder.encode(LinkAbort(stream=stream.sid)))
            self._flush()  # at once: every step until the engine hears it is wasted work there

    def reset(self, reason: str) -> None:
        """End the link now: every stream on it fails at once instead of at its read timeout."""
        self.fail_all(reason)
        if self._transport is not None:
            self._transport.abort()

    def fail_all(self, reason: str) -> None:
        if self.error is None:
            self.error = EngineUnavailableError(f"engine {self.url} failed: {reason}")
        if not self._handshake.done():
            self._handshake.set_exception(self.error)
            self._handshake.exception()  # retrieved: connect may have stopped waiting
        streams, self._streams = self._streams, {}
        for stream in streams.values():
            stream.fail(self.error)

    async def aclose(self) -> None:
        """Close the link politely (the engine aborts what is still open on it)."""
        if self.error is None and self._transport is not None:
            self._ws.send_close()
            self._flush()
        self.fail_all("the link was closed")
        if self._transport is not None:
            self._transport.close()

    def _send(self, data: bytes) -> None:
        """Frame ``data``; the frames of one turn of the event loop leave in one write at its end
        (a loopback write costs the sender CPU of its own; under load many requests send in a turn)."""
        self._ws.send_binary(data)
        if not self._is_flush_due:
            self._is_flush_due = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._is_flush_due = False
        writes = self._ws.data_to_send()
        if self._transport is not None and writes:
            self._transport.write(b"".join(writes))  # the empty SEND_EOF adds nothing

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio subclasses
        request = self._ws.connect()
        request.headers["Authorization"] = f"Bearer {self._token}"
        self._ws.send_request(request)
        self._flush()

    def data_received(self, data: bytes) -> None:
        ws = self._ws
        ws.receive_data(data)
        touched: dict[int, LinkStream] = {}
        for event in ws.events_received():
            if type(event) is Frame:
                opcode = event.opcode
                if opcode is Opcode.BINARY or opcode is Opcode.CONT:
                    if not event.fin or self._fragments:
                        self._fragments += event.data
                        if not event.fin:
                            continue
                        message, self._fragments = bytes(self._fragments), bytearray()
                        self._dispatch(message, touched)
                    else:
                        self._dispatch(event.data, touched)
                elif opcode is Opcode.CLOSE:
                    self.fail_all(f"the engine closed the link ({ws.close_code})")
            elif isinstance(event, Response):
                if ws.handshake_exc is not None:
                    self.reset(
                        f"the engine refused the link ({event.status_code}): is it older than the gateway?"
                    )
                    return
                if not self._handshake.done():
                    self._handshake.set_result(None)
            # a client receives no requests
        self._settle(touched)
        self._flush()  # pongs, the close handshake's answer, aborts of streams past their bound
        if ws.parser_exc is not None:
            self.reset(f"the engine broke the WebSocket protocol: {ws.parser_exc}")
        elif ws.state is State.CLOSED and self._transport is not None:
            self._transport.close()

    def _dispatch(self, message: bytes | bytearray | memoryview, touched: dict[int, LinkStream]) -> None:
        """Append each entry of ``message`` to its stream's pending frames (``_settle`` wakes them)."""
        try:
            entries = _batch_decoder.decode(message)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            self.reset(f"unreadable link message ({exc})")
            return
        streams = self._streams
        for sid, raw in entries:
            stream = streams.get(sid)
            if stream is not None:
                stream.pending.append(raw)
                stream.num_bytes += len(raw)
                touched[sid] = stream

    def _settle(self, touched: dict[int, LinkStream]) -> None:
        """Wake each stream that got frames in this read; abort those whose reader fell too far behind."""
        streams = self._streams
        for sid, stream in touched.items():
            if not stream.settle() and streams.pop(sid, None) is not None:
                self._ws.send_binary(_encoder.encode(LinkAbort(stream=sid)))

    def eof_received(self) -> bool:
        self._ws.receive_eof()
        self.fail_all("EOFError: the engine closed the connection")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        why = (
            f"{type(exc).__name__}: {exc}"
            if exc is not None
            else "EOFError: the engine connection was closed"
        )
        self.fail_all(why)
