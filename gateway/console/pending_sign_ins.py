"""Sign-ins started at the IdP and not yet finished: the state, nonce and PKCE verifier of each.

    /console/sign-in/oidc:  state, nonce, verifier := random; challenge := b64url(SHA-256(verifier))
                            cookie strongroom_console_state := state   (binds the flow to this browser)
                            302 -> IdP authorize?response_type=code&state&nonce&code_challenge(S256)
    /console/callback:      state == cookie (constant time), taken from here once (no replay)
                            token endpoint gets code + verifier; ID token's nonce must match

Entries expire after ``ttl_s``; at most ``max_pending`` are held (oldest dropped first), so a
flood of abandoned sign-ins cannot grow memory.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["PendingSignIn", "PendingSignIns", "pkce_challenge"]


def pkce_challenge(verifier: str) -> str:
    """RFC 7636 S256: BASE64URL(SHA-256(ASCII(verifier))) without padding."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


@dataclass(frozen=True)
class PendingSignIn:
    state: str
    nonce: str
    code_verifier: str
    """43..128 characters from the unreserved set (RFC 7636 section 4.1); 43 here (256 bits)."""
    started_at: float

    def __repr__(self) -> str:
        return f"PendingSignIn(started_at={self.started_at})"

    @property
    def code_challenge(self) -> str:
        return pkce_challenge(self.code_verifier)


class PendingSignIns:
    def __init__(
        self, *, ttl_s: float = 600.0, max_pending: int = 10000, clock: Callable[[], float] = time.time
    ):
        self._ttl_s = ttl_s
        self._max_pending = max_pending
        self._clock = clock
        self._pending: OrderedDict[str, PendingSignIn] = OrderedDict()

    def start(self) -> PendingSignIn:
        now = self._clock()
        while self._pending and (
            len(self._pending) >= self._max_pending
            or now - next(iter(self._pending.values())).started_at >= self._ttl_s
        ):
            self._pending.popitem(last=False)
        pending = PendingSignIn(
            state=secrets.token_urlsafe(32),
            nonce=secrets.token_urlsafe(32),
            code_verifier=secrets.token_urlsafe(32),
            started_at=now,
        )
        self._pending[pending.state] = pending
        return pending

    def finish(self, state: str | None, cookie_state: str | None) -> PendingSignIn | None:
        """The sign-in ``state`` names, once, if this browser started it and it has not expired."""
        if not state or not cookie_state or not hmac.compare_digest(state.encode(), cookie_state.encode()):
            return None
        pending = self._pending.pop(state, None)
        if pending is None or self._clock() - pending.started_at >= self._ttl_s:
            return None
        return pending
