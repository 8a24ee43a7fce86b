from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from keys_testing import CHUNK, ListSink

from keys import KeyFileProvider, KeysError, SealedModelError, open_model, rotate, seal_model, verify_model


def _weights_region(path: Path) -> bytes:
    from keys.header import FileHeader

    raw = path.read_bytes()
    return raw[FileHeader.decode(raw, "x")[1] :]


def test_rotation_rewraps_without_reencrypting(
    tmp_path: Path, sealed_dir: Path, provider: KeyFileProvider, plain_files: dict[str, bytes]
) -> None:
    before = _weights_region(sealed_dir / "model.safetensors.sealed")
    stale_copy = tmp_path / "stale"
    shutil.copytree(sealed_dir, stale_copy)
    sink = ListSink()

    report = rotate(provider, [sealed_dir], audit=sink)

    assert report.new_key.version == 2 and [r.version for r in report.retired] == [1]
    assert _weights_region(sealed_dir / "model.safetensors.sealed") == before
    assert verify_model(sealed_dir, provider).key.version == 2
    with open_model(sealed_dir, provider, audit=None, process="t") as source:
        assert bytes(source.read("model.safetensors")) == plain_files["model.safetensors"]
        assert source.signer.version == 2
    with pytest.raises(SealedModelError, match="retired"):
        open_model(stale_copy, provider, audit=None, process="t")
    reloaded = KeyFileProvider.load(provider.path)
    with pytest.raises(SealedModelError, match="retired"):
        open_model(stale_copy, reloaded, audit=None, process="t")
    operations = [json.loads(e.detail)["operation"] for e in sink.events]
    assert operations == ["rotate", "rewrap", "retire"]


def test_failed_model_blocks_retirement(tmp_path: Path, sealed_dir: Path, provider: KeyFileProvider) -> None:
    broken = tmp_path / "broken"
    seal_model({"w": b"x" * CHUNK}, broken, "broken", provider, chunk_size=CHUNK)
    (broken / "manifest.json").write_bytes(b"{}")
    with pytest.raises(KeysError, match="NOT retired"):
        rotate(provider, [sealed_dir, broken])
    assert provider.current().version == 2
    assert [v.status.value for v in provider.versions()] == ["previous", "current"]
    with open_model(sealed_dir, provider, audit=None, process="t") as source:
        assert source.key.version == 2


def test_rotating_twice(sealed_dir: Path, provider: KeyFileProvider) -> None:
    rotate(provider, [sealed_dir])
    rotate(provider, [sealed_dir])
    assert verify_model(sealed_dir, provider).key.version == 3
