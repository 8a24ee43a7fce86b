"""The seal registry: versions per model, rollback refused unless pinned, edits detected, rotation
covers every registered sealing wherever it lives (pen-test findings 6 and 7)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from keys_testing import CHUNK

from keys import (
    KeyFileProvider,
    ModelIdentityError,
    SealRegistry,
    SealRegistryError,
    admission,
    model_source,
    open_model,
    rotate,
    seal_model,
    verify_model,
)
from keys.config import KeysConfig


def _digest(model_dir: Path) -> str:
    return hashlib.sha256((model_dir / "manifest.json").read_bytes()).hexdigest()


@pytest.fixture
def registry(tmp_path: Path, provider: KeyFileProvider) -> SealRegistry:
    return SealRegistry(tmp_path / "keys" / "sealings.json", provider)


def _seal(registry: SealRegistry, provider: KeyFileProvider, dst: Path, model_id: str, data: bytes) -> Path:
    seal_model({"w": data}, dst, model_id, provider, chunk_size=CHUNK, registry=registry, sealed_by="t")
    return dst


def _open(model_dir: Path, provider: KeyFileProvider, registry: SealRegistry, name: str) -> bytes:
    source = model_source(
        model_dir, KeysConfig(), provider, audit=None, process="t", sealed_as=name, registry=registry
    )
    try:
        return bytes(source.read("w"))  # type: ignore[attr-defined]
    finally:
        source.close()  # type: ignore[attr-defined]


def test_versions_count_up_and_an_older_sealing_is_refused_unless_pinned(
    tmp_path: Path, provider: KeyFileProvider, registry: SealRegistry
) -> None:
    v1 = _seal(registry, provider, tmp_path / "v1", "m", b"old weights")
    v2 = _seal(registry, provider, tmp_path / "v2", "m", b"new weights")
    body = registry.read()
    assert [(s.model_id, s.version) for s in body.sealings] == [("m", 1), ("m", 2)]
    assert body.sealings[0].manifest_sha256 == _digest(v1)

    assert _open(v2, provider, registry, "m") == b"new weights"
    with pytest.raises(SealRegistryError, match=r"v1 of 'm' is older than the newest registered v2"):
        _open(v1, provider, registry, "m")

    old_seal = body.sealings[0].seal_id
    registry.pin("m", old_seal)
    assert _open(v1, provider, registry, "m") == b"old weights"
    with pytest.raises(SealRegistryError, match="pinned to seal"):
        _open(v2, provider, registry, "m")  # pinned means exactly that sealing
    registry.pin("m", None)
    with pytest.raises(SealRegistryError, match="older"):
        _open(v1, provider, registry, "m")


def test_unregistered_and_altered_registrations_are_refused(
    tmp_path: Path, provider: KeyFileProvider, registry: SealRegistry
) -> None:
    stray = tmp_path / "stray"
    seal_model({"w": b"x"}, stray, "m", provider, chunk_size=CHUNK)  # sealed without registering
    with pytest.raises(SealRegistryError, match="not registered"):
        _open(stray, provider, registry, "m")
    registry.register(
        "m", json.loads((stray / "manifest.json").read_bytes())["seal_id"], "0" * 64, stray, "t"
    )
    with pytest.raises(SealRegistryError, match="manifest differs"):
        _open(stray, provider, registry, "m")


def test_an_edited_registry_is_detected(
    tmp_path: Path, provider: KeyFileProvider, registry: SealRegistry
) -> None:
    _seal(registry, provider, tmp_path / "v1", "m", b"a")
    _seal(registry, provider, tmp_path / "v2", "m", b"b")
    raw = json.loads(registry.path.read_text())
    body = json.loads(raw["body"])
    body["sealings"] = body["sealings"][:1]  # drop the newer version so v1 would load again
    raw["body"] = json.dumps(body, sort_keys=True, separators=(",", ":"))
    registry.path.write_text(json.dumps(raw))
    with pytest.raises(SealRegistryError, match="signature does not verify"):
        _open(tmp_path / "v1", provider, registry, "m")


def test_swapped_directories_are_refused_under_the_other_name(
    tmp_path: Path, provider: KeyFileProvider, registry: SealRegistry
) -> None:
    a = _seal(registry, provider, tmp_path / "a", "model-a", b"A")
    b = _seal(registry, provider, tmp_path / "b", "model-b", b"B")
    swapped = tmp_path / "swap"
    shutil.move(a, swapped)
    shutil.move(b, a)
    shutil.move(swapped, b)
    with pytest.raises(ModelIdentityError, match="sealed as 'model-b', configured to serve 'model-a'"):
        _open(a, provider, registry, "model-a")
    with pytest.raises(ModelIdentityError):
        verify_model(a, provider, admit=admission("model-a", registry))
    assert _open(a, provider, registry, "model-b") == b"B"  # explicitly configured (sealed_model_id)


def test_rotation_rewraps_registered_models_anywhere_and_keeps_keys_they_need(
    tmp_path: Path, provider: KeyFileProvider, registry: SealRegistry
) -> None:
    elsewhere = _seal(registry, provider, tmp_path / "elsewhere" / "m", "m", b"weights")
    report = rotate(provider, [], registry=registry)  # the CLI passes <data_dir>/models only
    assert report.rewrapped == (str(elsewhere.resolve()),) and [r.version for r in report.retired] == [1]
    reloaded = KeyFileProvider.load(provider.path)
    with open_model(elsewhere, reloaded, audit=None, process="t") as source:
        assert bytes(source.read("w")) == b"weights" and source.key.version == 2
    assert _open(elsewhere, reloaded, SealRegistry(registry.path, reloaded), "m") == b"weights"

    # A registered sealing that cannot be rewrapped keeps every older version alive.
    gone = _seal(registry, provider, tmp_path / "gone", "g", b"g")
    shutil.move(gone, tmp_path / "moved")
    with pytest.raises(Exception, match="NOT retired"):
        rotate(provider, [], registry=registry)
    assert [v.status.value for v in provider.versions()] == ["retired", "previous", "current"]
