"""Console sessions: idle and absolute time-outs, sign-out, eviction, fresh ids (injected clock)."""

from __future__ import annotations

from common.principal import Principal
from gateway.console.session_store import SessionStore

OFFICER = Principal(subject="officer", roles=("compliance",), issuer="idp")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _store(clock: Clock, *, max_sessions: int = 10) -> SessionStore:
    return SessionStore(idle_s=60, absolute_s=300, max_sessions=max_sessions, clock=clock)


def test_idle_timeout_ends_a_session_and_each_request_restarts_it() -> None:
    clock = Clock()
    store = _store(clock)
    session_id, session = store.create(OFFICER)
    clock.now += 59
    assert store.get(session_id) is session
    clock.now += 59  # 118 s after sign-in, 59 s after the last request
    assert store.get(session_id) is session
    clock.now += 60
    assert store.get(session_id) is None
    assert len(store) == 0


def test_absolute_timeout_ends_even_an_active_session() -> None:
    clock = Clock()
    store = _store(clock)
    session_id, _ = store.create(OFFICER)
    for _ in range(5):
        clock.now += 50
        assert store.get(session_id) is not None
    clock.now += 50  # 300 s after sign-in, though only 50 s idle
    assert store.get(session_id) is None


def test_sign_out_unknown_ids_and_fresh_values() -> None:
    clock = Clock()
    store = _store(clock)
    first_id, first = store.create(OFFICER)
    second_id, second = store.create(OFFICER)
    assert first_id != second_id and first.csrf_token != second.csrf_token
    assert len(first_id) >= 43 and len(first.csrf_token) >= 43
    store.end(first_id)
    assert store.get(first_id) is None
    assert store.get(second_id) is second
    assert store.get(None) is None and store.get("") is None and store.get(second_id + "x") is None


def test_the_oldest_session_makes_room_and_repr_holds_no_secret() -> None:
    clock = Clock()
    store = _store(clock, max_sessions=2)
    ids = [store.create(OFFICER)[0] for _ in range(3)]
    assert store.get(ids[0]) is None
    assert store.get(ids[1]) is not None and store.get(ids[2]) is not None
    session = store.get(ids[2])
    assert session is not None and session.csrf_token not in repr(session) and ids[2] not in repr(session)
