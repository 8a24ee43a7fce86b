"""A rank started on its own (another host's ``strongroom engine-rank``, here a second process on
this one) joins rank 0 through torchrun's variables, and the pipeline gives one rank's tokens."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

import engine
from engine.config import EngineConfig, ModelSpec
from engine.errors import EngineConfigError
from engine.llm_engine import LLMEngine
from engine.serving.protocol import KeyOperationEvent
from engine.worker.distributed import free_port
from engine.worker.rank_environment import RankEnvironment
from tests.unit.engine.parallel_generation import (
    GREEDY,
    Result,
    assert_same_greedy,
    assert_same_seeded,
    config,
    generate,
)

REPO = Path(engine.__file__).resolve().parent.parent
TORCHRUN = {
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29500",
    "RANK": "3",
    "WORLD_SIZE": "4",
    "LOCAL_RANK": "1",
}


def test_reads_torchrun_variables() -> None:
    env = RankEnvironment.from_environ(TORCHRUN)
    assert env == RankEnvironment(rank=3, world_size=4, local_rank=1, address="10.0.0.1:29500")
    env.check(EngineConfig(tensor_parallel_size=2, pipeline_parallel_size=2))
    assert RankEnvironment.from_environ({**TORCHRUN, "LOCAL_RANK": ""}).local_rank == 0


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"RANK": "1", "WORLD_SIZE": "2"}, "needs MASTER_ADDR, MASTER_PORT in its environment"),
        ({**TORCHRUN, "RANK": "-1"}, "RANK must be a non-negative integer, not '-1'"),
        (
            {**TORCHRUN, "WORLD_SIZE": "8"},
            "WORLD_SIZE 8 is not tensor_parallel_size 2 x pipeline_parallel_size 2 = 4",
        ),
        ({**TORCHRUN, "RANK": "0"}, r"RANK 0 must be in \[1, 3\]: rank 0 is the engine itself"),
    ],
)
def test_bad_environment_is_refused(environ: dict[str, str], message: str) -> None:
    with pytest.raises(EngineConfigError, match=message):
        RankEnvironment.from_environ(environ).check(
            EngineConfig(tensor_parallel_size=2, pipeline_parallel_size=2)
        )


def test_rank_zero_needs_the_address_for_ranks_it_does_not_start(
    model_dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MASTER_PORT", raising=False)
    external = msgspec.structs.replace(config(model_dirs, 1, 2), spawned_ranks=1)
    with pytest.raises(EngineConfigError, match="need MASTER_ADDR and MASTER_PORT set"):
        LLMEngine(external)


@pytest.fixture
def rank_one(
    model_dirs: dict[str, Path], tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, str]]]:
    """``strongroom engine-rank`` as rank 1 of a two-stage pipeline, from a settings file."""
    models = "\n".join(
        f'[[engine.models]]\nname = "{spec.name}"\npath = "{spec.path}"'
        for spec in config(model_dirs, 1).models
    )
    settings = tmp_path / "strongroom.toml"
    settings.write_text(
        f'data_dir = "{tmp_path}"\n[keys]\nrequire_sealed = false\n'
        "[engine]\nblock_size = 4\nkv_cache_bytes = 1048576\npipeline_parallel_size = 2\nspawned_ranks = 1\n"
        + models
    )
    port = str(free_port("127.0.0.1"))
    env = {**os.environ, "PYTHONPATH": str(REPO), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
    env = {k: v for k, v in env.items() if not k.startswith("STRONGROOM_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "strongroom", "engine-rank", "--config", str(settings)],
        env={**env, "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    yield proc, {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
    if proc.poll() is None:
        proc.kill()
    proc.wait()


@pytest.mark.timeout(180)
def test_rank_started_elsewhere_serves_the_last_stage(
    model_dirs: dict[str, Path],
    single_rank: Result,
    rank_one: tuple[subprocess.Popen[bytes], dict[str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proc, address = rank_one
    for var, value in address.items():
        monkeypatch.setenv(var, value)
    engine = LLMEngine(msgspec.structs.replace(config(model_dirs, 1, 2), spawned_ranks=1))
    try:
        assert engine.ranks is not None and engine.ranks.pids == []  # it started none itself
        result = generate(engine)
    finally:
        engine.close()
    assert_same_greedy(single_rank, result)
    assert_same_seeded(single_rank, result)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr.decode()[-2000:]


@pytest.mark.timeout(180)
def test_sealed_model_over_a_rank_started_elsewhere(model_dirs: dict[str, Path], tmp_path: Path) -> None:
    """Sealed checkpoints and pipeline stages: rank 0 spawns nothing (a spawn would carry the data
    key), the rank started elsewhere unwraps it through the key provider itself, and each stage
    decrypts only the chunks of its own tensors."""
    from keys import KeyFileProvider, KeysConfig, seal_model, seal_registry
    from strongroom.config import load_settings
    from strongroom.engine_process import model_sources

    prompt = [0, *range(40, 56)]
    plain = LLMEngine(
        EngineConfig(models=(ModelSpec(name="m", path=str(model_dirs["qwen3"])),), block_size=4)
    )
    plain.add_request("r", "m", prompt, GREEDY)
    expected = [t for _, d in _drain(plain) for t in d.token_ids]
    assert len(expected) == GREEDY.max_tokens
    provider = KeyFileProvider.create(tmp_path / "keys" / "master.key")
    registry = seal_registry(KeysConfig(), tmp_path, provider)
    seal_model(
        model_dirs["qwen3"], tmp_path / "models" / "m", "m", provider, registry=registry, chunk_size=4096
    )
    settings_file = tmp_path / "strongroom.toml"
    settings_file.write_text(
        f'data_dir = "{tmp_path}"\n'
        "[engine]\nblock_size = 4\nkv_cache_bytes = 1048576\npipeline_parallel_size = 2\nspawned_ranks = 1\n"
        '[[engine.models]]\nname = "m"\npath = "models/m"\n'
    )
    port = str(free_port("127.0.0.1"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRONGROOM_")}
    env |= {"PYTHONPATH": str(REPO), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
    proc = subprocess.Popen(
        [sys.executable, "-m", "strongroom", "engine-rank", "--config", str(settings_file)],
        env={**env, "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        settings = load_settings(str(settings_file))
        key_operations: list = []  # type: ignore[type-arg]
        sources, failed = model_sources(settings, key_operations)
        assert failed == {} and [op.operation for op in key_operations] == ["unwrap"]
        os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})
        try:
            staged = LLMEngine(settings.engine, settings.data_path, sources)
        finally:
            del os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]
        try:
            assert staged.ranks is not None
            # The remote rank's own unwrap reaches rank 0, for the gateway's audit log.
            (remote,) = [msgspec.convert(op, KeyOperationEvent) for op in staged.ranks.key_operations]
            assert (remote.operation, remote.model, remote.error) == ("unwrap", "m", "")
            assert remote.process == f"engine pid {proc.pid}" != key_operations[0].process
            staged.add_request("r", "m", prompt, GREEDY)
            assert [t for _, d in _drain(staged) for t in d.token_ids] == expected
        finally:
            staged.close()
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr.decode()[-2000:]
        assert "key operation unwrap of model m" in stderr.decode()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _drain(engine: LLMEngine) -> list:  # type: ignore[type-arg]
    out = []
    while engine.has_work:
        out.extend(engine.step())
    return out


def test_spawned_ranks_refuse_a_sealed_source_without_an_opener(model_dirs: dict[str, Path]) -> None:
    """The Python API handed a sealed source but no way to open it in the ranks it would spawn
    (``strongroom`` passes a ``KeyProviderOpener``: test_sealed_spawned_ranks)."""

    class Sealed:  # any source other than a plaintext directory
        name = "sealed"

        def names(self) -> list[str]:
            return []

        def read(self, name: str) -> bytes:
            raise AssertionError("never read")

    with pytest.raises(EngineConfigError, match="unless the engine is given a source_opener") as err:
        LLMEngine(config(model_dirs, 1, 2), sources={"qwen3": Sealed()})
    assert err.match("set spawned_ranks = 1 and start the other ranks with `strongroom engine-rank`")
