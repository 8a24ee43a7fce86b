"""A sealed FP8 checkpoint serves through the engine server like a plaintext one, and the engine
link (EngineServer -> EngineClient -> EnginePool) names each model's quantization, of its weights
and of its KV cache, as does the model manifest its audit records carry."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import uvicorn
from quant_checkpoints import write_quantized

from engine.config import EngineConfig, ModelSpec
from engine.core.sampling_params import SamplingParams
from engine.llm import LLM
from engine.serving.async_engine import AsyncEngine
from engine.serving.client import EngineClient
from engine.serving.protocol import GenerateRequest
from engine.serving.server import EngineServer
from gateway.engine_pool import EnginePool
from keys import KeyFileProvider, open_model_async, seal_model

pytestmark = pytest.mark.anyio
TOKEN = "quant-test-token"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@contextmanager
def _serve(backend: AsyncEngine, manifests: dict[str, str] | None = None) -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(
        uvicorn.Config(
            EngineServer(backend, TOKEN, manifests=manifests).app(), log_level="error", lifespan="on"
        )
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "engine server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


async def test_sealed_fp8_checkpoint_serves_and_reports_its_quantization(
    model_dirs: dict[str, Path], tmp_path: Path
) -> None:
    plain = write_quantized(model_dirs["llama"], tmp_path / "plain", "hf-fp8-block", (16, 32))
    provider = KeyFileProvider.create(tmp_path / "keys" / "master.key")
    files = {p.relative_to(plain).as_posix(): p.read_bytes() for p in plain.rglob("*") if p.is_file()}
    seal_model(files, tmp_path / "sealed", "m", provider)
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    expected = (
        LLM(str(plain), kv_cache_bytes=1 << 20, kv_cache_dtype="fp8")
        .generate([[0, 4, 5, 6]], params)[0]
        .token_ids
    )
    with await open_model_async(tmp_path / "sealed", provider, audit=None, process="t") as source:
        config = EngineConfig(
            models=(ModelSpec(name="m", path=str(tmp_path / "sealed")),),
            kv_cache_bytes=1 << 20,
            kv_cache_dtype="fp8",
        )
        engine = AsyncEngine(config, sources={"m": source})
        await engine.start()
        try:
            with _serve(engine, {"m": source.manifest_sha256}) as url:
                client = EngineClient(url, TOKEN)
                info = await client.info()
                assert [(m.name, m.quantization, m.kv_cache_dtype) for m in info.models] == [
                    ("m", "fp8-block16x32", "float8_e4m3fn")
                ]
                [card] = info.models
                assert card.manifest_sha256 == source.manifest_sha256 and card.audit_manifest == (
                    f"{card.manifest_sha256} weights=fp8-block16x32 kv=fp8"
                )
                request = GenerateRequest(
                    request_id="r1", model="m", params=params, prompt_token_ids=[0, 4, 5, 6]
                )
                async with client.generate(request) as frames:  # one frame of events per step
                    got = [t async for frame in frames for event in frame for t in event.token_ids]
                assert got == expected
                pool = EnginePool([client], refresh_s=60.0)
                await pool.start()
                try:
                    assert pool.describe()[0]["quantization"] == {"m": "fp8-block16x32"}
                    assert pool.describe()[0]["kv_cache_dtype"] == {"m": "float8_e4m3fn"}
                    assert pool.models()["m"].quantization == "fp8-block16x32"
                finally:
                    await pool.aclose()
                await client.aclose()
        finally:
            await engine.shutdown()
