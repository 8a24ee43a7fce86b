from __future__ import annotations

import base64
import json
import os
import pickle
import stat
from pathlib import Path

import pytest

from keys import (
    KeyFileProvider,
    KeysConfigError,
    RetiredKeyError,
    SealedModelError,
    Secret,
    UnknownKeyError,
    WrongKeyError,
    open_model,
    seal_model,
)


def test_key_file_is_0600_and_holds_no_plaintext_dek(tmp_path: Path) -> None:
    provider = KeyFileProvider.create(tmp_path / "k" / "master.key")
    assert stat.S_IMODE(os.stat(provider.path).st_mode) == 0o600
    with pytest.raises(KeysConfigError, match="exists already"):
        KeyFileProvider.create(provider.path)
    wrapped = provider.wrap(b"d" * 32)
    assert provider.unwrap(wrapped.blob, wrapped.ref.key_id, wrapped.ref.version) == b"d" * 32
    assert b"d" * 32 not in provider.path.read_bytes()


def test_world_readable_key_file_is_refused(tmp_path: Path) -> None:
    provider = KeyFileProvider.create(tmp_path / "master.key")
    os.chmod(provider.path, 0o644)
    with pytest.raises(KeysConfigError, match="chmod 600"):
        KeyFileProvider.load(provider.path)


def test_missing_key_file_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(KeysConfigError, match=r"nope\.key"):
        KeyFileProvider.load(tmp_path / "nope.key")


def test_passphrase_protection(tmp_path: Path) -> None:
    path = tmp_path / "master.key"
    created = KeyFileProvider.create(path, passphrase=Secret("correct horse"), scrypt_n=1 << 10)
    wrapped = created.wrap(b"k" * 32)
    root = created._roots[1]
    assert base64.b64encode(root) not in path.read_bytes()
    assert KeyFileProvider.needs_passphrase(path)
    with pytest.raises(KeysConfigError, match="no passphrase"):
        KeyFileProvider.load(path)
    with pytest.raises(KeysConfigError, match="wrong passphrase"):
        KeyFileProvider.load(path, passphrase=Secret("wrong"))
    loaded = KeyFileProvider.load(path, passphrase=Secret("correct horse"))
    assert loaded.unwrap(wrapped.blob, wrapped.ref.key_id, 1) == b"k" * 32
    loaded.rotate()
    again = KeyFileProvider.load(path, passphrase=Secret("correct horse"))
    assert again.current().version == 2


def test_reprs_and_secret_redact(tmp_path: Path) -> None:
    provider = KeyFileProvider.create(tmp_path / "master.key")
    secret = Secret("hunter2")
    assert "hunter2" not in repr(secret) and "hunter2" not in str(secret)
    with pytest.raises(TypeError):
        pickle.dumps(secret)
    root_b64 = base64.b64encode(provider._roots[1]).decode()
    assert root_b64 not in repr(provider) and "redacted" in repr(provider)
    assert "blob=<" in repr(provider.wrap(b"x" * 32))


def test_secret_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KEYS_TEST_PASS", raising=False)
    with pytest.raises(KeysConfigError, match="KEYS_TEST_PASS"):
        Secret.from_env("KEYS_TEST_PASS")
    monkeypatch.setenv("KEYS_TEST_PASS", "s3cret")
    assert Secret.from_env("KEYS_TEST_PASS").reveal() == b"s3cret"


def test_unknown_key_id_and_version(tmp_path: Path, sealed_dir: Path, provider: KeyFileProvider) -> None:
    stranger = KeyFileProvider.create(tmp_path / "other.key")
    with pytest.raises(SealedModelError, match="is not held by this provider"):
        open_model(sealed_dir, stranger, audit=None, process="t")
    ref = provider.current()
    with pytest.raises(UnknownKeyError, match="not held"):
        stranger.unwrap(b"x" * 60, ref.key_id, 1)
    with pytest.raises(UnknownKeyError, match="does not exist"):
        provider.unwrap(b"x" * 60, ref.key_id, 9)


def test_wrong_key_material_same_id(tmp_path: Path, provider: KeyFileProvider) -> None:
    model = tmp_path / "m"
    seal_model({"w": b"weights"}, model, "m", provider, chunk_size=8)
    body = json.loads(provider.path.read_bytes())
    body["versions"][0]["material"] = base64.b64encode(os.urandom(32)).decode()
    forged = tmp_path / "forged.key"
    fd = os.open(forged, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, json.dumps(body).encode())
    os.close(fd)
    impostor = KeyFileProvider.load(forged)
    with pytest.raises(WrongKeyError):
        impostor.unwrap(provider.wrap(b"z" * 32).blob, provider.current().key_id, 1)
    with pytest.raises(SealedModelError, match="signature does not verify"):
        open_model(model, impostor, audit=None, process="t")


def test_retire_before(tmp_path: Path) -> None:
    provider = KeyFileProvider.create(tmp_path / "master.key")
    old = provider.wrap(b"o" * 32)
    provider.rotate()
    assert provider.unwrap(old.blob, old.ref.key_id, 1) == b"o" * 32
    assert [r.version for r in provider.retire_before(2)] == [1]
    for loaded in (provider, KeyFileProvider.load(provider.path)):
        with pytest.raises(RetiredKeyError):
            loaded.unwrap(old.blob, old.ref.key_id, 1)
        assert [(v.ref.version, v.status.value) for v in loaded.versions()] == [
            (1, "retired"),
            (2, "current"),
        ]


def test_config_fails_closed_on_incomplete_hsm_settings() -> None:
    from keys import KeysConfig

    assert KeysConfig().require_sealed is True
    with pytest.raises(KeysConfigError, match="pkcs11_token_label and pkcs11_pin_env"):
        KeysConfig(provider="pkcs11", pkcs11_token_label="t")
    with pytest.raises(KeysConfigError, match="pkcs11_key_id"):
        KeysConfig(pkcs11_key_id="a/b")
