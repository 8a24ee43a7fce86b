"""Signatures already checked: a token seen before skips the signature math, and nothing else.

A client sends the same bearer token on every request until it expires, and checking its
signature is the costliest step of authentication (Ed25519, RSA more; figures in
bench/BENCHMARKS.md). The outcome of that step depends only on the token's bytes and the key, so
it is remembered for the exact token and the exact key object that verified it::

    sha256(token) ─▶ (key object, header, payload, exp)

A hit is used only when the key the issuer resolves *now* (issuer, pinned algorithm, kid) is
that same object, so a key that left the key files or the JWKS stops verifying at once (the
verifier checks; an entry of a key gone stays unused until it expires or is verified again). Every
other check still runs on every request: header rules, claims against the clock, revocation. The
header and payload are those bytes' own, so a token seen before is not decoded again either.
Only tokens that passed everything are stored, so a flood of forged tokens pays the full check
each time and cannot displace anything but the oldest entries. Entries leave at their token's
``exp`` or when the table is full (oldest first).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["Verified", "VerifiedTokens"]


class Verified(NamedTuple):
    key: object
    """The key object that verified the token."""
    header: dict[str, Any]
    payload: dict[str, Any]
    expires_at: float


class VerifiedTokens:
    """Payloads of tokens whose signature verified, by the SHA-256 of the token."""

    def __init__(self, clock: Callable[[], float], *, max_entries: int = 10_000) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._clock = clock
        self._max_entries = max_entries
        self._entries: dict[bytes, Verified] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def find(self, token: str) -> Verified | None:
        """What ``token`` was when it verified, unless it has expired since; the caller uses its
        payload only if ``key`` is the very key the issuer resolves now."""
        digest = hashlib.sha256(token.encode()).digest()
        entry = self._entries.get(digest)
        if entry is not None and self._clock() >= entry.expires_at:
            del self._entries[digest]
            return None
        return entry

    def remember(
        self, token: str, key: object, header: dict[str, Any], payload: dict[str, Any], *, expires_at: float
    ) -> None:
        """Store a token that passed every check; it is forgotten at ``expires_at``."""
        if len(self._entries) >= self._max_entries:
            del self._entries[next(iter(self._entries))]
        digest = hashlib.sha256(token.encode()).digest()
        self._entries[digest] = Verified(key, header, payload, expires_at)
