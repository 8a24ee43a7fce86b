"""Signatures already checked: a token seen before skips the signature math, and nothing else.

A client sends the same bearer token on every request until it expires, and checking its
signature is the costliest step of authentication (Ed25519, RSA more; figures in
bench/BENCHMARKS.md). The outcome of that step depends only on the token's bytes and the key, so
it is remembered for the exact token and the exact key object that verified it::

    sha256(token) ─▶ (key object, payload, exp)

A hit is used only when the key the issuer resolves *now* (issuer, pinned algorithm, kid) is
that same object, so a key that left the key files or the JWKS stops verifying at once. Every
other check still runs on every request: header rules, claims against the clock, revocation.
Only tokens that passed everything are stored, so a flood of forged tokens pays the full check
each time and cannot displace anything but the oldest entries. Entries leave at their token's
``exp`` or when the table is full (oldest first).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["VerifiedTokens"]


class _Entry(NamedTuple):
    key: object
    payload: dict[str, Any]
    expires_at: float


class VerifiedTokens:
    """Payloads of tokens whose signature verified, by the SHA-256 of the token."""

    def __init__(self, clock: Callable[[], float], *, max_entries: int = 10_000) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._clock = clock
        self._max_entries = max_entries
        self._entries: dict[bytes, _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def payload(self, token: str, key: object) -> dict[str, Any] | None:
        """The payload ``token`` had when ``key`` (this very object) verified it, else None."""
        digest = hashlib.sha256(token.encode()).digest()
        entry = self._entries.get(digest)
        if entry is None:
            return None
        if entry.key is not key or self._clock() >= entry.expires_at:
            del self._entries[digest]
            return None
        return entry.payload

    def remember(self, token: str, key: object, payload: dict[str, Any], *, expires_at: float) -> None:
        """Store a token that passed every check; it is forgotten at ``expires_at``."""
        if len(self._entries) >= self._max_entries:
            del self._entries[next(iter(self._entries))]
        digest = hashlib.sha256(token.encode()).digest()
        self._entries[digest] = _Entry(key, payload, expires_at)
