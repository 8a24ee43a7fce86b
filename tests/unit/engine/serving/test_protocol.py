"""EngineServer and EngineClient over real HTTP on loopback, with the model-free stub backend."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import uvicorn

from engine.core.sampling_params import SamplingParams
from engine.errors import EngineUnavailableError, PromptTooLongError, UnknownModelError
from engine.serving.client import EngineClient
from engine.serving.protocol import GenerateRequest
from engine.serving.server import EngineServer
from engine.serving.stub_engine import StubEngine

pytestmark = pytest.mark.anyio
TOKEN = "t0ken-for-tests"


@contextmanager
def engine_server(backend: StubEngine) -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(EngineServer(backend, TOKEN).app(), log_level="error", lifespan="on")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "engine server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def request(model: str = "demo-chat", max_tokens: int = 3, **kw: object) -> GenerateRequest:
    return GenerateRequest(
        request_id=f"r-{time.monotonic_ns()}",
        model=model,
        params=SamplingParams(max_tokens=max_tokens),
        **kw,  # type: ignore[arg-type]
    )


async def test_generate_streams_every_delta_and_info_lists_models() -> None:
    with engine_server(StubEngine()) as url:
        client = EngineClient(url, TOKEN)
        info = await client.info()
        assert [m.name for m in info.models] == ["demo-chat", "demo-base"]
        assert await client.is_ready()
        async with client.generate(request(prompt="hi there", max_tokens=3)) as events:
            got = [e async for e in events]
        assert [e.text for e in got] == [" hello"] * 3
        assert [e.finish_reason for e in got] == [None, None, "length"]
        assert got[-1].num_output_tokens == 3
        await client.aclose()


async def test_chat_messages_are_rendered_by_the_engine() -> None:
    from engine.serving.protocol import ChatMessage

    with engine_server(StubEngine()) as url:
        client = EngineClient(url, TOKEN)
        req = request(messages=[ChatMessage(role="user", content="hello")], max_tokens=1)
        async with client.generate(req) as events:
            [only] = [e async for e in events]
        assert only.num_prompt_tokens == len("<user>hello<assistant>") // 4
        await client.aclose()


async def test_token_count_is_what_generate_charges() -> None:
    from engine.serving.protocol import ChatMessage

    with engine_server(StubEngine()) as url:
        client = EngineClient(url, TOKEN)
        long_text = "x" * 16_000  # over the inline limit: counted off the loop
        for req in (
            request(messages=[ChatMessage(role="user", content="hello")], max_tokens=1),
            request(prompt=long_text, max_tokens=1),
            request(prompt_token_ids=[1, 2, 3], max_tokens=1),
        ):
            async with client.generate(req) as events:
                charged = [e async for e in events][-1].num_prompt_tokens
            assert await client.count_tokens(req) == charged
        with pytest.raises(UnknownModelError):
            await client.count_tokens(request(model="nope", prompt="hi"))
        await client.aclose()


async def test_errors_cross_the_wire_as_their_own_classes() -> None:
    with engine_server(StubEngine()) as url:
        client = EngineClient(url, TOKEN)
        with pytest.raises(UnknownModelError):
            async with client.generate(request(model="nope", prompt="x")) as events:
                [e async for e in events]
        with pytest.raises(PromptTooLongError):
            async with client.generate(request(prompt="x", max_tokens=5000)) as events:
                [e async for e in events]
        await client.aclose()


async def test_wrong_token_is_refused() -> None:
    with engine_server(StubEngine()) as url:
        client = EngineClient(url, "wrong")
        with pytest.raises(EngineUnavailableError):
            await client.info()
        with pytest.raises(EngineUnavailableError):
            async with client.generate(request(prompt="x")) as events:
                [e async for e in events]
        await client.aclose()


async def test_leaving_the_stream_early_aborts_the_request() -> None:
    backend = StubEngine(token_delay_s=0.01)
    with engine_server(backend) as url:
        client = EngineClient(url, TOKEN)
        req = request(prompt="x", max_tokens=1000)
        async with client.generate(req) as events:
            async for _ in events:
                break
        deadline = time.monotonic() + 5
        while backend.active and time.monotonic() < deadline:
            time.sleep(0.01)
        assert backend.active == set(), "the engine kept generating after the gateway left"
        await client.aclose()


async def test_dead_engine_is_unavailable_not_a_hang() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = EngineClient(f"http://127.0.0.1:{port}", TOKEN, connect_timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(EngineUnavailableError):
        await client.info()
    with pytest.raises(EngineUnavailableError):
        async with client.generate(request(prompt="x")) as events:
            [e async for e in events]
    assert time.monotonic() - started < 3
    assert not await client.is_ready()
    await client.aclose()
