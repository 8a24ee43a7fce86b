"""Ranks that rank 0 spawns open a sealed model themselves (``strongroom``'s ``KeyProviderOpener``,
through the key provider): the data key never leaves the process that unwrapped it, each rank's
unwrap reaches rank 0 for the audit log, and a rank whose key does not open fails the start."""

from __future__ import annotations

import asyncio
import pickle
from pathlib import Path

import pytest

from engine.config import EngineConfig, ModelSpec
from engine.errors import EngineRankError
from engine.llm_engine import LLMEngine
from engine.serving.async_engine import AsyncEngine
from engine.serving.protocol import GenerateRequest, KeyOperationEvent
from keys import KeyFileProvider, KeysConfig, SealedSource, Secret, key_file_path, seal_model, seal_registry
from strongroom.config import Settings
from strongroom.engine_process import KeyProviderOpener, build_backend, model_sources
from tests.unit.engine.parallel_generation import GREEDY

PROMPT = [0, *range(40, 56)]
PASSPHRASE_ENV = "SEALED_TP_TEST_PASSPHRASE"  # (not STRONGROOM_*: that would be read as a setting)
PASSPHRASE = "correct horse battery staple"
WRONG_ENV = "SEALED_TP_TEST_WRONG_PASSPHRASE"


@pytest.fixture
def settings(model_dirs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """A qwen3 tiny model sealed under a passphrase-protected key file; tensor parallel 2, both
    ranks on this host. The passphrase is in the environment only, which spawned ranks inherit."""
    monkeypatch.setenv(PASSPHRASE_ENV, PASSPHRASE)
    keys = KeysConfig(passphrase_env=PASSPHRASE_ENV)
    provider = KeyFileProvider.create(
        key_file_path(keys, tmp_path), passphrase=Secret(PASSPHRASE), scrypt_n=1 << 10
    )
    registry = seal_registry(keys, tmp_path, provider)
    seal_model(
        model_dirs["qwen3"], tmp_path / "models" / "m", "m", provider, registry=registry, chunk_size=4096
    )
    engine = EngineConfig(
        models=(ModelSpec(name="m", path="models/m"),),
        block_size=4,
        kv_cache_bytes=1 << 20,
        tensor_parallel_size=2,
        num_threads=1,
    )
    return Settings(data_dir=str(tmp_path), keys=keys, engine=engine)


@pytest.fixture
def expected(model_dirs: dict[str, Path]) -> list[int]:
    """Greedy tokens of one rank on the plaintext checkpoint."""
    plain = LLMEngine(
        EngineConfig(models=(ModelSpec(name="m", path=str(model_dirs["qwen3"])),), block_size=4)
    )
    plain.add_request("r", "m", PROMPT, GREEDY)
    tokens: list[int] = []
    while plain.has_work:
        tokens.extend(t for _, delta in plain.step() for t in delta.token_ids)
    assert len(tokens) == GREEDY.max_tokens
    return tokens


@pytest.mark.timeout(180)
def test_spawned_rank_serves_a_sealed_model(settings: Settings, expected: list[int]) -> None:
    """Through ``build_backend``, as ``strongroom serve`` and ``strongroom engine`` build it."""
    loaded = build_backend(settings)
    assert loaded.failed == {} and [op.operation for op in loaded.key_operations] == ["unwrap"]
    engine = loaded.engine
    assert isinstance(engine, AsyncEngine)

    async def run() -> tuple[list[int], list[KeyOperationEvent], list[int | None]]:
        await engine.start()
        try:
            request = GenerateRequest(request_id="r", model="m", params=GREEDY, prompt_token_ids=PROMPT)
            frames = [frame async for frame in engine.generate(request)]
            ranks = engine.core.ranks
            assert ranks is not None
            return (
                [t for frame in frames for d in frame for t in d.token_ids],
                engine.rank_key_operations,
                ranks.pids,
            )
        finally:
            await engine.shutdown()

    tokens, rank_ops, pids = asyncio.run(run())
    assert tokens == expected
    # Rank 1 unwrapped the data key itself; its operation reaches rank 0, naming its own process.
    (rank_zero,) = loaded.key_operations
    (rank_one,) = rank_ops
    assert (rank_one.operation, rank_one.model, rank_one.error) == ("unwrap", "m", "")
    assert rank_one.key_id == rank_zero.key_id and rank_one.key_version == rank_zero.key_version
    assert rank_one.process == f"engine pid {pids[0]}" != rank_zero.process


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (KeysConfig(key_file="keys/other.key"), r"ManifestSignatureError: .* is not held by this provider"),
        (KeysConfig(key_file="keys/absent.key"), r"ModelKeyError: .*\(no master key at .*absent\.key\)"),
        (KeysConfig(passphrase_env=WRONG_ENV), r"\(key provider unavailable: .*passphrase"),
    ],
    ids=["another-key", "no-key-file", "wrong-passphrase"],
)
def test_a_rank_whose_key_does_not_open_fails_the_start(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keys: KeysConfig, message: str
) -> None:
    """Rank 0 opened the model; the rank it spawns opens it with another key, none, or a wrong
    passphrase: the start fails at once with the rank's reason, not a hang or a bare exit code."""
    KeyFileProvider.create(tmp_path / "keys" / "other.key")
    monkeypatch.setenv(WRONG_ENV, "not the passphrase")
    sources, failed = model_sources(settings, [])
    assert failed == {}
    elsewhere = KeyProviderOpener(keys=keys, data_dir=settings.data_dir)
    with pytest.raises(
        EngineRankError, match=r"tensor-parallel rank 1 could not start: could not load \['m'\]"
    ) as err:
        LLMEngine(settings.engine, settings.data_path, sources, source_opener=elsewhere)
    assert err.match(message), str(err.value)


def test_the_opener_carries_no_secret_and_a_sealed_source_does_not_pickle(settings: Settings) -> None:
    opener = KeyProviderOpener.of(settings)
    blob = pickle.dumps(opener)
    assert PASSPHRASE.encode() not in blob and PASSPHRASE_ENV.encode() in blob  # the variable's name
    assert pickle.loads(blob) == opener
    sources, _ = model_sources(settings, [])
    assert isinstance(sources["m"], SealedSource)
    with pytest.raises(TypeError, match="SealedSource cannot be pickled: it holds the data key"):
        pickle.dumps(sources["m"])
