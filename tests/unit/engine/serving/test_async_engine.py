from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from engine.config import EngineConfig, ModelSpec
from engine.core.outputs import StreamDelta
from engine.core.sampling_params import SamplingParams
from engine.errors import EngineUnavailableError, InvalidRequestError, PromptTooLongError, UnknownModelError
from engine.loading.model_source import DirectorySource
from engine.serving.async_engine import AsyncEngine
from engine.serving.protocol import ChatMessage, GenerateRequest

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def config(paths: dict[str, str], **options: object) -> EngineConfig:
    specs = tuple(ModelSpec(name=n, path=p, max_model_len=128) for n, p in paths.items())
    options = {"kv_cache_bytes": 1 << 20, **options}
    return EngineConfig(models=specs, block_size=4, **options)  # type: ignore[arg-type]


def request(rid: str, model: str, prompt: str | list[int], params: SamplingParams) -> GenerateRequest:
    if isinstance(prompt, str):
        return GenerateRequest(request_id=rid, model=model, params=params, prompt=prompt)
    return GenerateRequest(request_id=rid, model=model, params=params, prompt_token_ids=prompt)


async def collect(
    engine: AsyncEngine, rid: str, model: str, prompt: str | list[int], params: SamplingParams
) -> list[StreamDelta]:
    frames = [frame async for frame in engine.generate(request(rid, model, prompt, params))]
    for frame in frames:  # one delta per completion index and frame
        assert len({d.index for d in frame}) == len(frame)
    return [d for frame in frames for d in frame]


async def test_two_models_stream_concurrently_from_one_pool(model_dirs: dict[str, Path]) -> None:
    # Relative paths resolve against data_dir; one model comes through an explicit source.
    engine = AsyncEngine(
        config({"a": "llama", "b": "unused"}),
        data_dir=model_dirs["llama"].parent,
        sources={"b": DirectorySource(model_dirs["qwen3"])},
    )
    await engine.start()
    try:
        infos = {i.name: i for i in engine.model_infos()}
        assert (
            infos["a"].max_model_len == 128 and infos["a"].has_chat_template and infos["a"].dtype == "float32"
        )
        params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
        a, b = await asyncio.gather(
            collect(engine, "r1", "a", "hello world", params),
            collect(engine, "r2", "b", [0, 5, 6, 7], params),
        )
        # However many steps each frame carries (a reader that falls behind gets them merged).
        assert [d.finish_reason for d in a] == [None] * (len(a) - 1) + ["length"]
        assert sum(len(d.token_ids) for d in a) == 8 and a[-1].num_output_tokens == 8
        assert sum(len(d.token_ids) for d in b) == 8 and b[-1].num_output_tokens == 8
        assert a[-1].num_prompt_tokens == len(engine.tokenize("a", "hello world"))
        stats = engine.stats()
        assert stats["blocks_free"] == stats["blocks_total"] and stats["running"] == 0
    finally:
        await engine.shutdown()


async def test_abort_frees_blocks_and_ends_the_stream(model_dirs: dict[str, Path]) -> None:
    engine = AsyncEngine(config({"a": str(model_dirs["llama"])}))
    await engine.start()
    try:
        params = SamplingParams(temperature=0, max_tokens=100, ignore_eos=True)
        stream = engine.generate(request("r", "a", [0, *range(10, 40)], params))
        [first] = await anext(stream)
        assert first.finish_reason is None
        assert engine.stats()["blocks_free"] < engine.stats()["blocks_total"]
        await engine.abort("r")
        assert engine.stats()["blocks_free"] == engine.stats()["blocks_total"]
        rest = [d async for frame in stream for d in frame]
        assert rest[-1].finish_reason == "abort"
    finally:
        await engine.shutdown()


async def test_errors_raise_before_the_first_delta(model_dirs: dict[str, Path]) -> None:
    engine = AsyncEngine(config({"a": str(model_dirs["llama"])}))
    with pytest.raises(EngineUnavailableError):
        await collect(engine, "x", "a", "hi", SamplingParams())
    await engine.start()
    try:
        with pytest.raises(UnknownModelError):
            await collect(engine, "r", "nope", "hi", SamplingParams())
        with pytest.raises(PromptTooLongError):
            await collect(engine, "r", "a", list(range(200)), SamplingParams())
        with pytest.raises(InvalidRequestError):
            await collect(engine, "r", "a", [99999], SamplingParams())
        with pytest.raises(InvalidRequestError):
            await collect(engine, "r", "a", [], SamplingParams())
        # the engine still serves after all that
        out = await collect(
            engine, "ok", "a", "hi", SamplingParams(temperature=0, max_tokens=2, ignore_eos=True)
        )
        assert out[-1].finish_reason == "length"
    finally:
        await engine.shutdown()


async def test_render_chat_and_sampling_with_n_and_seed(model_dirs: dict[str, Path]) -> None:
    engine = AsyncEngine(config({"a": str(model_dirs["llama"])}))
    await engine.start()
    try:
        text = engine.render_chat("a", [{"role": "user", "content": "hi"}])
        assert text == "<s><|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        params = SamplingParams(temperature=1.0, max_tokens=6, seed=7, n=2, ignore_eos=True, logprobs=2)
        first = await collect(engine, "s1", "a", text, params)
        again = await collect(engine, "s2", "a", text, params)
        # What the gateway reserves quota with is what the request is charged (BOS included).
        assert engine.count_tokens(request("c", "a", text, params)) == first[-1].num_prompt_tokens
        chat = GenerateRequest(
            request_id="c", model="a", params=params, messages=[ChatMessage(role="user", content="hi")]
        )
        assert engine.count_tokens(chat) == len(engine.chat_prompt("a", [{"role": "user", "content": "hi"}]))
        by_index = lambda ds: {i: [t for d in ds if d.index == i for t in d.token_ids] for i in (0, 1)}  # noqa: E731
        assert by_index(first) == by_index(again)
        assert all(d.logprobs is not None and len(d.logprobs[0].top) == 2 for d in first if d.token_ids)
    finally:
        await engine.shutdown()


async def test_prompt_longer_than_the_pool_is_rejected(model_dirs: dict[str, Path]) -> None:
    engine = AsyncEngine(config({"a": str(model_dirs["llama"])}, kv_cache_bytes=2048 * 4))
    await engine.start()
    try:
        assert engine.stats()["blocks_total"] == 4
        with pytest.raises(PromptTooLongError, match="KV pool"):
            await collect(engine, "r", "a", list(range(1, 40)), SamplingParams())
    finally:
        await engine.shutdown()


async def test_aborts_racing_admission_always_close_their_streams(model_dirs: dict[str, Path]) -> None:
    engine = AsyncEngine(config({"a": str(model_dirs["llama"])}))
    await engine.start()
    try:
        params = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True, n=2)

        async def one(i: int) -> list[StreamDelta]:
            stream = engine.generate(request(f"r{i}", "a", [0, i + 5, i + 6], params))
            # The request is submitted when iteration starts; abort it right behind that.
            first = asyncio.ensure_future(anext(stream))
            await asyncio.sleep(0)
            if i % 2:
                await engine.abort(f"r{i}")
            return [*await first] + [d async for frame in stream for d in frame]

        results = await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(8))), timeout=60)
        for i, deltas in enumerate(results):
            finals = sorted((d.index, d.finish_reason) for d in deltas if d.finish_reason)
            assert finals == ([(0, "abort"), (1, "abort")] if i % 2 else [(0, "length"), (1, "length")])
        stats = engine.stats()
        assert stats["blocks_free"] == stats["blocks_total"]
        assert stats["running"] == 0 and stats["waiting"] == 0
    finally:
        await engine.shutdown()


async def test_a_reader_that_falls_behind_gets_the_steps_it_missed_in_one_frame(
    model_dirs: dict[str, Path],
) -> None:
    engine = AsyncEngine(config({"a": str(model_dirs["llama"])}))
    await engine.start()
    try:
        params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, n=2)
        stream = engine.generate(request("slow", "a", [0, 5, 6, 7], params))
        first = await anext(stream)
        while engine.stats()["running"]:  # every step runs while this reader looks away
            await asyncio.sleep(0.01)
        rest = [frame async for frame in stream]
        assert len(rest) == 1, "the missed steps arrive as one frame"
        [late] = rest
        assert sorted(d.index for d in late) == [0, 1]
        for d in late:
            assert d.finish_reason == "length" and d.num_output_tokens == 12
            earlier = sum(len(e.token_ids) for e in first if e.index == d.index)
            assert len(d.token_ids) == 12 - earlier
    finally:
        await engine.shutdown()


async def test_a_step_reaches_the_event_loop_in_one_hand_over_for_all_its_streams(
    model_dirs: dict[str, Path],
) -> None:
    """Not one wake-up of the event loop per token: per step, however many streams and completions."""
    engine = AsyncEngine(config({"a": str(model_dirs["llama"])}))
    await engine.start()
    loop = asyncio.get_running_loop()
    hand_overs = 0
    call_soon_threadsafe = loop.call_soon_threadsafe

    def counted(*args: Any, **kw: Any) -> Any:
        nonlocal hand_overs
        hand_overs += 1
        return call_soon_threadsafe(*args, **kw)

    loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
    try:
        params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, n=2)
        steps_before = engine.core.num_steps
        outs = await asyncio.gather(*(collect(engine, f"h{i}", "a", [0, 5 + i, 6], params) for i in range(4)))
        num_steps = engine.core.num_steps - steps_before
        assert all(sum(len(d.token_ids) for d in out) == 16 for out in outs)  # 4 requests x 2 x 8 tokens
        assert hand_overs <= num_steps < 64
    finally:
        loop.call_soon_threadsafe = call_soon_threadsafe  # type: ignore[method-assign]
        await engine.shutdown()
