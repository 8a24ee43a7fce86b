"""engine.serving.stub_engine: it steps like the engine, so the benchmark measures the real frames."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from engine.core.outputs import StreamDelta
from engine.core.sampling_params import SamplingParams
from engine.errors import PromptTooLongError, UnknownModelError
from engine.serving.protocol import ChatMessage, GenerateRequest
from engine.serving.stub_engine import StubEngine

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def request(rid: str, max_tokens: int, n: int = 1, model: str = "demo-chat") -> GenerateRequest:
    return GenerateRequest(
        request_id=rid, model=model, prompt="What is it?", params=SamplingParams(max_tokens=max_tokens, n=n)
    )


async def test_each_step_gives_every_request_one_token_and_a_late_reader_gets_them_merged() -> None:
    stub = StubEngine()
    fast, slow = stub.generate(request("fast", 5, n=2)), stub.generate(request("slow", 5))
    first_fast, first_slow = await anext(fast), await anext(slow)
    assert [(d.index, d.num_output_tokens) for d in first_fast] == [(0, 1), (1, 1)]
    assert [d.text for d in first_slow] == [" hello"]
    fast_rest = [frame async for frame in fast]
    assert all(len(frame) == 2 for frame in fast_rest)
    while "slow" in stub.active:  # steps go on while nobody reads "slow"
        await asyncio.sleep(0.001)
    [late] = [frame async for frame in slow]
    assert [(d.text, d.token_ids, d.finish_reason, d.num_output_tokens) for d in late] == [
        (" hello" * 4, [1] * 4, "length", 5)
    ]
    assert stub.active == set()


async def test_abort_ends_every_completion_and_validation_raises_first() -> None:
    stub = StubEngine(token_delay_s=0.01)
    stream = stub.generate(request("r", 1000, n=2))
    await anext(stream)
    await stub.abort("r")
    frames = [frame async for frame in stream]
    assert sorted((d.index, d.finish_reason) for d in frames[-1]) == [(0, "abort"), (1, "abort")]
    assert stub.num_aborted == 1 and stub.active == set()
    with pytest.raises(UnknownModelError):
        await anext(stub.generate(request("x", 1, model="nope")))
    with pytest.raises(PromptTooLongError):
        await anext(stub.generate(request("y", 5000)))
    chat = GenerateRequest(
        request_id="c",
        model="demo-chat",
        params=SamplingParams(),
        messages=[ChatMessage(role="user", content="hi")],
    )
    assert stub.count_tokens(chat) == len("<user>hi<assistant>") // 4
    await stub.shutdown()


async def test_a_finished_requests_clean_up_leaves_a_new_request_of_its_id_running() -> None:
    stub = StubEngine()
    old = stub.generate(request("same", 1))
    [done] = await anext(old)
    assert done.finish_reason == "length"
    new = stub.generate(request("same", 3))
    await anext(new)
    await old.aclose()  # the old stream's clean-up runs only now
    frames = await asyncio.wait_for(_all(new), timeout=5)
    assert frames[-1][-1].num_output_tokens == 3


async def _all(stream: AsyncIterator[list[StreamDelta]]) -> list[list[StreamDelta]]:
    return [frame async for frame in stream]
