"""What ``verify_model`` and ``rotate`` report: ids, sizes and digests, never material."""

from __future__ import annotations

import msgspec

from keys.provider import KeyRef


class FileReport(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    size: int
    sha256: str


class ManifestReport(msgspec.Struct, frozen=True, kw_only=True):
    model_id: str
    key: KeyRef
    """Master key version the data key is wrapped under."""
    signer: KeyRef
    """Version whose signing key signed the manifest."""
    files: tuple[FileReport, ...]
    total_bytes: int
    manifest_sha256: str = ""
    """Hex SHA-256 of manifest.json's bytes (the sealing's identity in the registry and records)."""


class RotationReport(msgspec.Struct, frozen=True, kw_only=True):
    new_key: KeyRef
    rewrapped: tuple[str, ...]
    """Model directories whose data keys are now under ``new_key``."""
    retired: tuple[KeyRef, ...]
    kept: tuple[KeyRef, ...] = ()
    """Older versions not retired because a registered model is still wrapped under them."""
