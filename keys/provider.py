"""What sealing needs from a key store: wrap and unwrap data keys, sign manifests, rotate.

Two implementations: ``KeyFileProvider`` (a 0600 file the operator controls, optionally behind a
scrypt passphrase) and ``Pkcs11Provider`` (an HSM; key material never leaves the token).
Versions of one key id count up from 1; rotation adds ``current + 1`` and later retires the
older ones. A version below the oldest live one is *retired*; one above ``current`` is *unknown*.
"""

from __future__ import annotations

import enum
from typing import Protocol, runtime_checkable

import msgspec

from keys.errors import RetiredKeyError, UnknownKeyError


class KeyRef(msgspec.Struct, frozen=True, kw_only=True):
    """Names one version of a master key. Never holds material."""

    key_id: str
    version: int

    def __str__(self) -> str:
        return f"{self.key_id}/v{self.version}"


class KeyStatus(enum.StrEnum):
    CURRENT = "current"
    """New data keys are wrapped and manifests signed under this version."""
    PREVIOUS = "previous"
    """Still unwraps and verifies; awaiting retirement after a rotation."""
    RETIRED = "retired"
    """Material destroyed; anything still under it is refused."""


class KeyVersionInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What ``strongroom keys show`` prints for one version: ids and state, no material."""

    ref: KeyRef
    status: KeyStatus
    signing_public_key: str = ""
    """Hex Ed25519 public key of this version (public; empty when retired)."""


class WrappedKey(msgspec.Struct, frozen=True, kw_only=True):
    """A data key encrypted under one master key version."""

    ref: KeyRef
    blob: bytes

    def __repr__(self) -> str:
        return f"WrappedKey(ref={self.ref}, blob=<{len(self.blob)} bytes>)"


class Signature(msgspec.Struct, frozen=True, kw_only=True):
    ref: KeyRef
    value: bytes


@runtime_checkable
class KeyProvider(Protocol):
    """A master key store. Implementations raise keys.errors on unknown/retired/wrong keys."""

    @property
    def kind(self) -> str:
        """ "file" or "pkcs11", for logs and audit detail."""
        ...

    def current(self) -> KeyRef: ...

    def versions(self) -> list[KeyVersionInfo]: ...

    def wrap(self, dek: bytes) -> WrappedKey:
        """Encrypt a data key under the current version."""
        ...

    def unwrap(self, blob: bytes, key_id: str, version: int) -> bytes:
        """The data key inside ``blob``; WrongKeyError if it does not authenticate."""
        ...

    def sign(self, message: bytes) -> Signature:
        """Ed25519 signature under the current version's signing key."""
        ...

    def signing_public_key(self, key_id: str, version: int) -> bytes:
        """Raw 32-byte Ed25519 public key of that version (for verification)."""
        ...

    def rotate(self) -> KeyRef:
        """Create version current + 1 and make it current; older versions stay usable until retired."""
        ...

    def retire_before(self, version: int) -> list[KeyRef]:
        """Destroy every version below ``version``; returns what was retired."""
        ...


def check_live(ref: KeyRef, expected_key_id: str, current: int, oldest_live: int) -> None:
    """Raise UnknownKeyError / RetiredKeyError unless ``ref`` names a live version of this key."""
    if ref.key_id != expected_key_id:
        raise UnknownKeyError(
            f"key id {ref.key_id!r} is not held by this provider (it holds {expected_key_id!r})"
        )
    if ref.version > current or ref.version < 1:
        raise UnknownKeyError(f"key {ref} does not exist (current version is {current})")
    if ref.version < oldest_live:
        raise RetiredKeyError(f"key {ref} was retired; data under it must be rewrapped before retirement")
