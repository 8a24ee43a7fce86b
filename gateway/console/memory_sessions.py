"""Sessions in this process's memory, oldest ended first when ``max_sessions`` are held."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from common.principal import Principal
from gateway.console.session_store import ConsoleSession, new_session, session_key

__all__ = ["MemorySessions"]


class MemorySessions:
    def __init__(
        self, *, idle_s: float, absolute_s: float, max_sessions: int, clock: Callable[[], float]
    ) -> None:
        self._idle_s = idle_s
        self._absolute_s = absolute_s
        self._max_sessions = max_sessions
        self._clock = clock
        self._sessions: OrderedDict[str, ConsoleSession] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    async def create(self, principal: Principal) -> tuple[str, ConsoleSession]:
        self._drop_expired()
        while len(self._sessions) >= self._max_sessions:
            self._sessions.popitem(last=False)
        session_id, session = new_session(principal, self._clock())
        self._sessions[session_key(session_id)] = session
        return session_id, session

    async def get(self, session_id: str | None) -> ConsoleSession | None:
        if not session_id:
            return None
        key = session_key(session_id)
        session = self._sessions.get(key)
        if session is None:
            return None
        now = self._clock()
        if self._seconds_left(session, now) <= 0:
            del self._sessions[key]
            return None
        session.last_seen = now
        return session

    async def end(self, session_id: str | None) -> None:
        if session_id:
            self._sessions.pop(session_key(session_id), None)

    async def aclose(self) -> None:
        self._sessions.clear()

    def _seconds_left(self, session: ConsoleSession, now: float) -> float:
        return session.seconds_left(now, idle_s=self._idle_s, absolute_s=self._absolute_s)

    def _drop_expired(self) -> None:
        now = self._clock()
        for key in [k for k, s in self._sessions.items() if self._seconds_left(s, now) <= 0]:
            del self._sessions[key]
