"""Console sessions: a random id in an HttpOnly cookie, everything else on the server.

A session ends on sign-out, after ``idle_s`` without a request, or ``absolute_s`` after sign-in,
whichever comes first. Ids are 256-bit random values; the store is keyed by their SHA-256 so a
memory dump or a timing side channel on the dict lookup reveals no usable cookie. Each session
carries its own CSRF token, sent back in every form and compared in constant time.

Sessions live in this process's memory: a restart signs everybody out, and replicas behind a
load balancer need sticky sessions for the console.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from common.principal import Principal

__all__ = ["ConsoleSession", "SessionStore"]


@dataclass
class ConsoleSession:
    """One signed-in officer. The cookie value is not kept; repr shows no secret."""

    principal: Principal
    csrf_token: str
    created_at: float
    last_seen: float

    def __repr__(self) -> str:
        return f"ConsoleSession(subject={self.principal.subject!r}, created_at={self.created_at})"


class SessionStore:
    def __init__(
        self,
        *,
        idle_s: float,
        absolute_s: float,
        max_sessions: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._idle_s = idle_s
        self._absolute_s = absolute_s
        self._max_sessions = max_sessions
        self._clock = clock
        self._sessions: OrderedDict[str, ConsoleSession] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self, principal: Principal) -> tuple[str, ConsoleSession]:
        """A new session for ``principal``: the cookie value (returned once) and the session."""
        self._drop_expired()
        while len(self._sessions) >= self._max_sessions:
            self._sessions.popitem(last=False)
        session_id = secrets.token_urlsafe(32)
        now = self._clock()
        session = ConsoleSession(
            principal=principal, csrf_token=secrets.token_urlsafe(32), created_at=now, last_seen=now
        )
        self._sessions[_key(session_id)] = session
        return session_id, session

    def get(self, session_id: str | None) -> ConsoleSession | None:
        """The live session for a cookie value, its idle clock restarted; None if absent or expired."""
        if not session_id:
            return None
        key = _key(session_id)
        session = self._sessions.get(key)
        if session is None:
            return None
        now = self._clock()
        if self._is_expired(session, now):
            del self._sessions[key]
            return None
        session.last_seen = now
        return session

    def end(self, session_id: str | None) -> None:
        if session_id:
            self._sessions.pop(_key(session_id), None)

    def _is_expired(self, session: ConsoleSession, now: float) -> bool:
        return now - session.last_seen >= self._idle_s or now - session.created_at >= self._absolute_s

    def _drop_expired(self) -> None:
        now = self._clock()
        for key in [k for k, s in self._sessions.items() if self._is_expired(s, now)]:
            del self._sessions[key]


def _key(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()
