from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

import pytest
from keys_testing import CHUNK, ListSink

from common.audit_event import Decision, EventType
from engine.loading.model_source import DirectorySource, ModelSource
from keys import (
    AuditRequiredError,
    ExportNotConfirmedError,
    KeyFileProvider,
    KeysConfig,
    ModelKeyError,
    PlaintextModelError,
    SealedModelError,
    SealedSource,
    is_sealed,
    model_source,
    open_model,
    open_model_async,
    seal_model,
    sealed_file,
    unseal_model,
    verify_model,
)
from keys.header import FileHeader


def test_read_every_file(sealed_dir: Path, provider: KeyFileProvider, plain_files: dict[str, bytes]) -> None:
    with open_model(sealed_dir, provider, audit=None, process="t") as source:
        assert isinstance(source, ModelSource)
        assert source.names() == sorted(plain_files)
        for name, data in plain_files.items():
            assert bytes(source.read(name)) == data
            assert source.size(name) == len(data)
        with pytest.raises(SealedModelError, match="missing file nope"):
            source.read("nope")


def test_parallel_segments_and_read_into(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, provider: KeyFileProvider
) -> None:
    monkeypatch.setattr(sealed_file, "SEGMENT_BYTES", CHUNK * 2)
    data = os.urandom(CHUNK * 40 + 5)
    seal_model({"w.safetensors": data}, tmp_path / "m", "m", provider, chunk_size=CHUNK)
    with open_model(tmp_path / "m", provider, audit=None, process="t") as source:
        assert bytes(source.read("w.safetensors")) == data
        out = bytearray(len(data))
        source.read_into("w.safetensors", memoryview(out))
        assert out == data
        with pytest.raises(ValueError, match="writable bytes"):
            source.read_into("w.safetensors", memoryview(bytearray(3)))
        for offset, length in [
            (0, 1),
            (CHUNK - 1, 2),
            (CHUNK * 3, CHUNK * 5 + 7),
            (len(data) - 5, 5),
            (10, 0),
        ]:
            assert bytes(source.read_range("w.safetensors", offset, length)) == data[offset : offset + length]
        with pytest.raises(ValueError, match="outside"):
            source.read_range("w.safetensors", len(data) - 1, 2)


def test_canary_never_reaches_disk(tmp_path: Path, provider: KeyFileProvider) -> None:
    canary = b"CANARY-" + os.urandom(12).hex().encode()
    weights = os.urandom(CHUNK * 5) + canary + os.urandom(CHUNK * 2)
    started = time.time() - 1
    data_dir = tmp_path / "data"
    seal_model({"model.safetensors": weights}, data_dir / "models" / "m", "m", provider, chunk_size=CHUNK)
    with open_model(data_dir / "models" / "m", provider, audit=None, process="t") as source:
        assert canary in source.read("model.safetensors")
        verify_model(data_dir / "models" / "m", provider)
        on_disk = [p for p in data_dir.rglob("*") if p.is_file()]
        temp = Path(tempfile.gettempdir())
        recent = [p for p in _walk(temp) if _is_recent_file(p, started)]
        assert on_disk, "the scan must see the sealed files"
        for path in on_disk + recent:
            assert canary not in _contents(path), f"plaintext canary found in {path}"


def _walk(root: Path) -> list[Path]:
    # os.walk skips directories that vanish mid-walk (rglob raises: a parallel test's browser
    # profile or temp dir may be deleted at any moment).
    return [Path(d, f) for d, _, files in os.walk(root, onerror=lambda _e: None) for f in files]


def _contents(path: Path) -> bytes:
    # Other tests running in parallel delete their temp files (e.g. SQLite -shm) at any moment.
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def _is_recent_file(path: Path, since: float) -> bool:
    try:
        return path.is_file() and not path.is_symlink() and path.stat().st_mtime >= since
    except OSError:
        return False


def test_every_unwrap_is_audited_without_material(sealed_dir: Path, provider: KeyFileProvider) -> None:
    sink = ListSink()
    with open_model(sealed_dir, provider, audit=sink, process="engine-0") as source:
        assert source.read("config.json")
    assert len(sink.events) == 1
    event = sink.events[0]
    assert event.event_type is EventType.KEY_OPERATION and event.decision is Decision.ALLOW
    detail = json.loads(event.detail)
    assert detail == {
        "key_id": provider.current().key_id, "key_version": 1, "model": "tiny", "operation": "unwrap",
        "process": "engine-0", "provider": "file",
    }  # fmt: skip


def test_audit_down_means_no_model(sealed_dir: Path, provider: KeyFileProvider) -> None:
    with pytest.raises(AuditRequiredError):
        open_model(sealed_dir, provider, audit=ListSink(down=True), process="engine-0")


def test_failed_unwrap_is_audited(sealed_dir: Path, provider: KeyFileProvider) -> None:
    path = sealed_dir / "config.json.sealed"
    raw = bytearray(path.read_bytes())
    header_len = FileHeader.decode(bytes(raw), "x")[1]
    raw[header_len - 1] ^= 1  # last byte of the wrapped data key
    path.write_bytes(raw)
    sink = ListSink()
    with pytest.raises(
        ModelKeyError, match=r"config\.json\.sealed: data key unavailable: data key does not unwrap"
    ):
        open_model(sealed_dir, provider, audit=sink, process="engine-0")
    assert [e.decision for e in sink.events] == [Decision.ERROR]
    assert sink.events[0].reason == "WrongKeyError"


def test_retired_signer_is_refused(sealed_dir: Path, provider: KeyFileProvider) -> None:
    provider.rotate()
    provider.retire_before(2)
    with pytest.raises(SealedModelError, match=r"manifest\.sig: signed by .*/v1: .* was retired"):
        open_model(sealed_dir, provider, audit=None, process="engine-0")


def test_open_model_async_inside_a_loop(sealed_dir: Path, provider: KeyFileProvider) -> None:
    sink = ListSink()

    async def serve() -> bytes:
        source = await open_model_async(sealed_dir, provider, audit=sink, process="engine-0")
        with source:
            return bytes(source.read("config.json"))

    assert asyncio.run(serve()).startswith(b"{")
    assert len(sink.events) == 1


def test_require_sealed_refuses_plaintext(
    tmp_path: Path, sealed_dir: Path, provider: KeyFileProvider
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text("{}")
    assert not is_sealed(plain) and is_sealed(sealed_dir)
    with pytest.raises(PlaintextModelError, match="not sealed"):
        model_source(plain, KeysConfig(), provider, audit=None, process="t", sealed_as="tiny")
    assert isinstance(
        model_source(
            plain, KeysConfig(require_sealed=False), None, audit=None, process="t", sealed_as="tiny"
        ),
        DirectorySource,
    )
    sealed = model_source(sealed_dir, KeysConfig(), provider, audit=None, process="t", sealed_as="tiny")
    assert isinstance(sealed, SealedSource)
    with pytest.raises(ModelKeyError, match="no key provider"):
        model_source(sealed_dir, KeysConfig(), None, audit=None, process="t", sealed_as="tiny")


def test_verify_and_unseal(
    tmp_path: Path, sealed_dir: Path, provider: KeyFileProvider, plain_files: dict[str, bytes]
) -> None:
    report = verify_model(sealed_dir, provider)
    assert report.model_id == "tiny" and report.total_bytes == sum(map(len, plain_files.values()))
    assert report.key == provider.current() == report.signer
    with pytest.raises(ExportNotConfirmedError):
        unseal_model(sealed_dir, tmp_path / "out", provider)
    assert not (tmp_path / "out").exists()
    sink = ListSink()
    unseal_model(sealed_dir, tmp_path / "out", provider, export=True, audit=sink)
    for name, data in plain_files.items():
        assert (tmp_path / "out" / name).read_bytes() == data
    assert any(json.loads(e.detail)["operation"] == "export" for e in sink.events)


def test_seal_refuses_bad_inputs(tmp_path: Path, provider: KeyFileProvider, sealed_dir: Path) -> None:
    with pytest.raises(Exception, match="not an empty directory"):
        seal_model({"a": b"x"}, sealed_dir, "x", provider)
    with pytest.raises(Exception, match="unsafe file name"):
        seal_model({"../escape": b"x"}, tmp_path / "bad", "x", provider)
    with pytest.raises(Exception, match="unsafe file name"):
        seal_model({"manifest.json": b"x"}, tmp_path / "bad", "x", provider)
    assert not (tmp_path / "bad").exists()


def test_seal_from_directory(tmp_path: Path, provider: KeyFileProvider) -> None:
    src = tmp_path / "hf"
    (src / "sub").mkdir(parents=True)
    (src / "config.json").write_text('{"a": 1}')
    (src / "sub" / "w.bin").write_bytes(os.urandom(300))
    seal_model(src, tmp_path / "sealed", "hf", provider, chunk_size=CHUNK)
    with open_model(tmp_path / "sealed", provider, audit=None, process="t") as source:
        assert source.read("sub/w.bin") == (src / "sub" / "w.bin").read_bytes()
    assert not list(tmp_path.glob(".sealed.sealing-*"))


def test_closed_source_refuses_reads(sealed_dir: Path, provider: KeyFileProvider) -> None:
    source = open_model(sealed_dir, provider, audit=None, process="t")
    source.close()
    with pytest.raises(SealedModelError, match="closed"):
        source.read("config.json")
    assert "material" not in repr(source) and "tiny" in repr(source)
