"""Where revocations are kept: the interface shared by the Redis and the SQLite store.

Both stores keep two kinds of entry, each with an expiry after which it can be forgotten:

- a token id (``jti``), until the token's own ``exp``;
- a subject with a cut-off time: every token of that subject issued at or before the cut-off is
  revoked; kept until no such token can still be valid (cut-off + max lifetime + leeway).

Times are passed in by the caller (the injected clock), so the stores never read a clock.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["RevocationStore"]


class RevocationStore(Protocol):
    """A durable set of revocations. Every method raises the backend's own error on failure."""

    async def add_token(self, jti: str, *, expires_at: float, now: float) -> None:
        """Revoke the token ``jti`` until ``expires_at``."""

    async def add_subject(self, subject: str, *, before: float, expires_at: float, now: float) -> None:
        """Revoke tokens of ``subject`` issued at or before ``before``; a later cut-off wins."""

    async def lookup(self, jti: str | None, subject: str, *, now: float) -> tuple[bool, float | None]:
        """Whether ``jti`` is revoked, and the subject's cut-off time if it has one."""

    async def aclose(self) -> None:
        """Release connections the store opened itself."""
