"""Clean-up that a cancelled request (the client left) must still finish: shielded from the cancel."""

from __future__ import annotations

import logging
from typing import Any

import anyio

from gateway.errors import GatewayError
from gateway.quota import QuotaLease

__all__ = ["close_lease", "shielded", "shielded_outcome"]

log = logging.getLogger("strongroom.gateway")


async def shielded(awaitable: Any) -> None:
    """Run to the end whatever cancels the caller; a failure is logged, not raised."""
    with anyio.CancelScope(shield=True):
        try:
            await awaitable
        except Exception:
            log.exception("clean-up after a stream failed")


async def shielded_outcome(awaitable: Any) -> Exception | None:
    """Like ``shielded``, but the failure comes back: the caller must not claim success after it."""
    with anyio.CancelScope(shield=True):
        try:
            await awaitable
        except Exception as exc:
            if not isinstance(exc, GatewayError):
                log.exception("finishing a stream failed")
            return exc
    return None


async def close_lease(lease: QuotaLease, used_tokens: int) -> None:
    """Charge what was really used (nothing for a refused request) and free the slot."""
    with anyio.CancelScope(shield=True):
        try:
            await lease.settle(used_tokens)
        finally:
            await lease.release()
