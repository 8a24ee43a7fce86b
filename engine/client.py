"""The gateway's side of ``engine.protocol``: one engine instance reached over HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import msgspec

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
from engine.protocol import DeltaEvent, EngineInfo, ErrorEvent, GenerateRequest, StreamEvent

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
_decoder = msgspec.json.Decoder(StreamEvent)
_encoder = msgspec.json.Encoder()


def _error_of(event: ErrorEvent) -> EngineError:
    return _BY_CODE.get(event.code, EngineError)(event.message, param=event.param)


class EngineClient:
    """Talks to one engine instance. Safe to share between concurrent requests."""

    def __init__(
        self, base_url: str, token: str, *, connect_timeout_s: float = 2.0, read_timeout_s: float = 600.0
    ):
        self.base_url = base_url.rstrip("/")
        self._probe_timeout = httpx.Timeout(5.0, connect=connect_timeout_s)
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers={"authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(read_timeout_s, connect=connect_timeout_s),
            limits=httpx.Limits(max_connections=1024, max_keepalive_connections=256),
        )

    def __repr__(self) -> str:
        return f"EngineClient({self.base_url!r})"

    async def aclose(self) -> None:
        await self._http.aclose()

    async def info(self) -> EngineInfo:
        try:
            resp = await self._http.get("/engine/v1/info", timeout=self._probe_timeout)
        except httpx.HTTPError as exc:
            raise EngineUnavailableError(f"engine {self.base_url} unreachable: {type(exc).__name__}") from exc
        if resp.status_code != 200:
            raise EngineUnavailableError(f"engine {self.base_url} answered {resp.status_code}")
        try:
            return msgspec.json.decode(resp.content, type=EngineInfo)
        except msgspec.MsgspecError as exc:
            raise EngineUnavailableError(f"engine {self.base_url} sent an unreadable info: {exc}") from None

    async def is_ready(self) -> bool:
        try:
            resp = await self._http.get("/engine/v1/health", timeout=2.0)
        except httpx.HTTPError:
            return False
        return resp.status_code == 200

    @asynccontextmanager
    async def generate(self, request: GenerateRequest) -> AsyncIterator[AsyncIterator[DeltaEvent]]:
        """Open a generation; leaving the ``async with`` early aborts it in the engine."""
        try:
            async with self._http.stream(
                "POST",
                "/engine/v1/generate",
                content=_encoder.encode(request),
                headers={"content-type": "application/json"},
            ) as resp:
                if resp.status_code != 200:
                    body = await resp.aread()
                    try:
                        event = msgspec.json.decode(body, type=ErrorEvent)
                    except msgspec.MsgspecError:
                        raise EngineUnavailableError(f"engine answered {resp.status_code}") from None
                    raise _error_of(event)
                yield self._events(resp)
        except httpx.HTTPError as exc:
            raise EngineUnavailableError(f"engine {self.base_url} failed: {type(exc).__name__}") from exc

    async def _events(self, resp: httpx.Response) -> AsyncIterator[DeltaEvent]:
        async for line in resp.aiter_lines():
            if not line:
                continue
            event = _decoder.decode(line)
            if isinstance(event, ErrorEvent):
                raise _error_of(event)
            yield event
