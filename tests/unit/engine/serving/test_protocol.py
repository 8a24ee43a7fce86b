"""EngineServer and EngineClient over real HTTP on loopback, with the model-free stub backend."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec
import pytest

from engine.config import EngineConfig, ModelSpec
from engine.core.sampling_params import SamplingParams
from engine.errors import EngineUnavailableError, InvalidRequestError, PromptTooLongError, UnknownModelError
from engine.llm import LLM
from engine.loading.demo import write_demo_model
from engine.serving.async_engine import AsyncEngine
from engine.serving.backend import EngineBackend
from engine.serving.client import EngineClient
from engine.serving.protocol import (
    DeltaEvent,
    DeltaFrame,
    EmbedRequest,
    GenerateRequest,
    KeyOperationEvent,
    ModelCard,
)
from engine.serving.stub_engine import StubEngine
from tests import stub_engine_server
from tests.ports import free_port

pytestmark = pytest.mark.anyio
TOKEN = "t0ken-for-tests"


@contextmanager
def engine_server(
    backend: EngineBackend, key_operations: list[KeyOperationEvent] | None = None
) -> Iterator[str]:
    with stub_engine_server.engine_server(backend, TOKEN, key_operations=key_operations) as url:
        yield url


def request(model: str = "demo-chat", max_tokens: int = 3, n: int = 1, **kw: object) -> GenerateRequest:
    return GenerateRequest(
        request_id=f"r-{time.monotonic_ns()}",
        model=model,
        params=SamplingParams(max_tokens=max_tokens, n=n),
        **kw,  # type: ignore[arg-type]
    )


async def events_of(frames: AsyncIterator[DeltaFrame]) -> list[DeltaEvent]:
    return [event async for frame in frames for event in frame]


async def test_generate_streams_every_delta_and_info_lists_models() -> None:
    with engine_server(StubEngine(embedding_models=("demo-embed",))) as url:
        client = EngineClient(url, TOKEN)
        info = await client.info()
        assert [(m.name, m.kind) for m in info.models] == [
            ("demo-chat", "chat"),
            ("demo-base", "chat"),
            ("demo-embed", "embedding"),
        ]
        assert await client.is_ready()
        async with client.generate(request(prompt="hi there", max_tokens=3)) as frames:
            got = await events_of(frames)
        # One event per step, or fewer if this reader fell behind (then merged): the same text.
        assert "".join(e.text for e in got) == " hello" * 3
        assert [e.finish_reason for e in got] == [None] * (len(got) - 1) + ["length"]
        assert got[-1].num_output_tokens == 3
        await client.aclose()


async def test_chat_messages_are_rendered_by_the_engine() -> None:
    from engine.serving.protocol import ChatMessage

    with engine_server(StubEngine()) as url:
        client = EngineClient(url, TOKEN)
        req = request(messages=[ChatMessage(role="user", content="hello")], max_tokens=1)
        async with client.generate(req) as frames:
            [only] = await events_of(frames)
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
            async with client.generate(req) as frames:
                charged = (await events_of(frames))[-1].num_prompt_tokens
            assert await client.count_tokens(req) == charged
        with pytest.raises(UnknownModelError):
            await client.count_tokens(request(model="nope", prompt="hi"))
        await client.aclose()


async def test_errors_cross_the_wire_as_their_own_classes() -> None:
    with engine_server(StubEngine()) as url:
        client = EngineClient(url, TOKEN)
        with pytest.raises(UnknownModelError):
            async with client.generate(request(model="nope", prompt="x")) as frames:
                await events_of(frames)
        with pytest.raises(PromptTooLongError):
            async with client.generate(request(prompt="x", max_tokens=5000)) as frames:
                await events_of(frames)
        await client.aclose()


async def test_wrong_token_is_refused() -> None:
    with engine_server(StubEngine()) as url:
        client = EngineClient(url, "wrong")
        with pytest.raises(EngineUnavailableError):
            await client.info()
        with pytest.raises(EngineUnavailableError):
            async with client.generate(request(prompt="x")) as frames:
                await events_of(frames)
        await client.aclose()


async def test_leaving_the_stream_early_aborts_the_request() -> None:
    backend = StubEngine(token_delay_s=0.01)
    with engine_server(backend) as url:
        client = EngineClient(url, TOKEN)
        req = request(prompt="x", max_tokens=1000)
        async with client.generate(req) as frames:
            async for _ in frames:
                break
        deadline = time.monotonic() + 5
        while backend.active and time.monotonic() < deadline:
            time.sleep(0.01)
        assert backend.active == set(), "the engine kept generating after the gateway left"
        await client.aclose()


async def test_dead_engine_is_unavailable_not_a_hang() -> None:
    client = EngineClient(f"http://127.0.0.1:{free_port()}", TOKEN, connect_timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(EngineUnavailableError):
        await client.info()
    with pytest.raises(EngineUnavailableError):
        async with client.generate(request(prompt="x")) as frames:
            await events_of(frames)
    assert time.monotonic() - started < 3
    assert not await client.is_ready()
    await client.aclose()


async def test_one_frame_per_step_carries_every_completion() -> None:
    with engine_server(StubEngine(token_delay_s=0.005)) as url:
        client = EngineClient(url, TOKEN)
        async with client.generate(request(prompt="x", max_tokens=3, n=2)) as frames:
            got = [frame async for frame in frames]
        # A frame per step (steps a slow reader missed merged into its next frame): each frame
        # holds both completions, each completion's tokens in order.
        assert all([e.index for e in frame] == [0, 1] for frame in got)
        assert [[e.num_output_tokens for e in frame] for frame in got][-1] == [3, 3]
        assert ["".join(f[i].text for f in got) for i in (0, 1)] == [" hello" * 3] * 2
        assert [e.finish_reason for e in got[-1]] == ["length", "length"]
        await client.aclose()


async def test_health_and_info_answer_while_every_generation_slot_is_taken() -> None:
    """A busy engine is not a dead one: probes never wait behind generations for a slot."""
    with engine_server(StubEngine(token_delay_s=0.01)) as url:
        client = EngineClient(url, TOKEN, max_connections=1)
        async with client.generate(request(prompt="x", max_tokens=1000)) as frames:
            await anext(frames)
            assert await asyncio.wait_for(client.is_ready(timeout_s=1.0), timeout=5)
            info = await asyncio.wait_for(client.info(), timeout=5)
            assert info.stats["running"] == 1
        await client.aclose()


async def test_embed_over_the_link_with_the_real_engine(tmp_path: Path) -> None:
    specs = tuple(
        ModelSpec(name=name, path=str(write_demo_model(name, tmp_path / name)), kind=kind)
        for name, kind in (("demo-embed", "embedding"), ("demo-chat", None))
    )
    texts = ["the bank", "a loan for the bank"]
    offline = LLM(tmp_path / "demo-embed", kind="embedding").embed(texts)
    backend = AsyncEngine(EngineConfig(models=specs, kv_cache_bytes=1 << 20))
    with engine_server(backend) as url:
        client = EngineClient(url, TOKEN)
        info = await client.info()
        assert {m.name: (m.kind, m.embedding_size) for m in info.models} == {
            "demo-embed": ("embedding", 64),
            "demo-chat": ("chat", 0),
        }
        req = EmbedRequest(request_id="e1", model="demo-embed", input=texts)
        num_tokens = await client.count_embedding_tokens(req)
        out = await client.embed(req)
        assert out.embeddings == offline and out.num_prompt_tokens == num_tokens > len(texts)
        short = await client.embed(
            EmbedRequest(request_id="e2", model="demo-embed", input=texts, dimensions=8)
        )
        assert [len(v) for v in short.embeddings] == [8, 8]
        with pytest.raises(InvalidRequestError, match="not an embedding model") as err:
            await client.embed(EmbedRequest(request_id="e3", model="demo-chat", input=texts))
        assert err.value.param == "model"
        with pytest.raises(InvalidRequestError, match="embedding model"):
            async with client.generate(request(model="demo-embed", prompt="hi")) as events:
                [e async for e in events]
        await client.aclose()


async def test_info_carries_the_other_ranks_key_operations_after_start() -> None:
    """A remote rank's unwrap (reported to rank 0 at start-up) reaches the gateway with rank 0's own."""
    own = KeyOperationEvent(
        operation="unwrap", key_id="k", key_version=1, model="m", process="engine pid 1", provider="file"
    )
    remote = msgspec.structs.replace(own, process="engine pid 2")

    class RankedStub(StubEngine):
        @property
        def rank_key_operations(self) -> list[KeyOperationEvent]:
            return [remote]

    with engine_server(RankedStub(), key_operations=[own]) as url:
        info = await EngineClient(url, TOKEN).info()
    assert info.key_operations == [own, remote]


def test_audit_manifest_names_the_sealing_and_the_quantization() -> None:
    card = ModelCard(name="m", max_model_len=8, has_chat_template=False)
    assert card.audit_manifest == ""  # plaintext, served as stored
    sealed = ModelCard(name="m", max_model_len=8, has_chat_template=False, manifest_sha256="ab" * 32)
    assert sealed.audit_manifest == "ab" * 32
    quantized = ModelCard(
        name="m",
        max_model_len=8,
        has_chat_template=False,
        manifest_sha256="ab" * 32,
        quantization="fp8-block128x128",
        kv_cache_dtype="float8_e4m3fn",
    )
    assert quantized.audit_manifest == f"{'ab' * 32} weights=fp8-block128x128 kv=fp8"
    assert len(quantized.audit_manifest) <= 128  # the audit log's cap on the field
    bf16_cache = ModelCard(name="m", max_model_len=8, has_chat_template=False, kv_cache_dtype="bfloat16")
    assert bf16_cache.audit_manifest == ""
