"""The trusted key: pinned outside the data directory, by file or fingerprint; unpinned says so."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from audit.config import AuditConfig
from audit.errors import AuditConfigError
from audit.signer import CheckpointSigner
from audit.trusted_key import trusted_key


@pytest.fixture
def own() -> CheckpointSigner:
    return CheckpointSigner(Ed25519PrivateKey.generate())


def _pem_file(path: Path, signer: CheckpointSigner) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(signer.public_key_pem())
    return path


def test_nothing_pinned_uses_the_own_key_and_says_so(tmp_path: Path, own) -> None:
    trusted = trusted_key(AuditConfig(), tmp_path / "data", own.verifier)
    assert not trusted.is_pinned and trusted.verifier is own.verifier


def test_a_pinned_file_is_the_trusted_key_whatever_the_data_directory_holds(tmp_path: Path, own) -> None:
    pinned_signer = CheckpointSigner(Ed25519PrivateKey.generate())
    pinned = _pem_file(tmp_path / "etc" / "audit.pub", pinned_signer)
    trusted = trusted_key(AuditConfig(public_key_file=str(pinned)), tmp_path / "data", own.verifier)
    assert trusted.is_pinned and trusted.verifier.key_id == pinned_signer.key_id


def test_the_command_line_key_overrides_the_configured_one(tmp_path: Path, own) -> None:
    configured = _pem_file(tmp_path / "etc" / "a.pub", CheckpointSigner(Ed25519PrivateKey.generate()))
    given = _pem_file(tmp_path / "etc" / "b.pub", own)
    cfg = AuditConfig(public_key_file=str(configured))
    trusted = trusted_key(cfg, tmp_path / "data", own.verifier, public_key_path=given)
    assert trusted.verifier.key_id == own.key_id and trusted.source == str(given)


def test_a_key_inside_the_data_directory_is_refused(tmp_path: Path, own) -> None:
    inside = _pem_file(tmp_path / "data" / "keys" / "audit.pub", own)
    with pytest.raises(AuditConfigError, match="data directory"):
        trusted_key(AuditConfig(public_key_file=str(inside)), tmp_path / "data", own.verifier)
    with pytest.raises(AuditConfigError, match="data directory"):
        trusted_key(AuditConfig(), tmp_path / "data", own.verifier, public_key_path=inside)


def test_a_fingerprint_pins_the_signing_key_wherever_it_lives(tmp_path: Path, own) -> None:
    cfg = AuditConfig(public_key_fingerprint=own.verifier.fingerprint)
    trusted = trusted_key(cfg, tmp_path / "data", own.verifier)
    assert trusted.is_pinned and trusted.verifier is own.verifier
    swapped = CheckpointSigner(Ed25519PrivateKey.generate())
    with pytest.raises(AuditConfigError, match="public_key_fingerprint"):
        trusted_key(cfg, tmp_path / "data", swapped.verifier)


def test_a_file_and_a_fingerprint_must_agree(tmp_path: Path, own) -> None:
    other = CheckpointSigner(Ed25519PrivateKey.generate())
    pinned = _pem_file(tmp_path / "etc" / "audit.pub", other)
    cfg = AuditConfig(public_key_file=str(pinned), public_key_fingerprint=own.verifier.fingerprint)
    with pytest.raises(AuditConfigError, match="public_key_fingerprint"):
        trusted_key(cfg, tmp_path / "data", own.verifier)


def test_an_unreadable_pinned_key_is_a_config_error(tmp_path: Path, own) -> None:
    cfg = AuditConfig(public_key_file=str(tmp_path / "etc" / "missing.pub"))
    with pytest.raises(AuditConfigError, match="unreadable"):
        trusted_key(cfg, tmp_path / "data", own.verifier)


@pytest.mark.parametrize(
    "fields",
    [
        {"public_key_file": "keys/audit.pub"},
        {"public_key_fingerprint": "abc"},
        {"public_key_fingerprint": "sha256:" + "A" * 64},
        {"witness_postgres_schema": "x; drop"},
    ],
)
def test_config_refuses_relative_keys_and_malformed_pins(fields) -> None:
    with pytest.raises(ValueError, match="audit\\."):
        AuditConfig(**fields)
