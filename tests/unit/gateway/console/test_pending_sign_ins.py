"""PKCE (RFC 7636) and the state that binds an IdP round trip to one browser, once."""

from __future__ import annotations

import re

from gateway.console.pending_sign_ins import PendingSignIns, pkce_challenge


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_s256_matches_the_rfc_7636_appendix_b_example() -> None:
    verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
    assert pkce_challenge(verifier) == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"


def test_verifiers_are_long_random_and_unreserved() -> None:
    pending = PendingSignIns()
    a, b = pending.start(), pending.start()
    for p in (a, b):
        assert re.fullmatch(r"[A-Za-z0-9_-]{43,128}", p.code_verifier)
        assert p.code_challenge == pkce_challenge(p.code_verifier) != p.code_verifier
    assert len({a.state, b.state, a.nonce, b.nonce, a.code_verifier, b.code_verifier}) == 6
    assert a.code_verifier not in repr(a) and a.nonce not in repr(a)


def test_state_must_match_this_browsers_cookie_and_works_once() -> None:
    pending = PendingSignIns()
    started = pending.start()
    other = pending.start()
    assert pending.finish(started.state, other.state) is None  # another browser's cookie
    assert pending.finish(started.state, None) is None
    assert pending.finish(None, started.state) is None
    assert pending.finish(started.state, started.state) is started
    assert pending.finish(started.state, started.state) is None  # replayed callback


def test_abandoned_sign_ins_expire_and_are_bounded() -> None:
    clock = Clock()
    pending = PendingSignIns(ttl_s=600, max_pending=3, clock=clock)
    old = pending.start()
    clock.now += 600
    assert pending.finish(old.state, old.state) is None
    flood = [pending.start() for _ in range(5)]
    assert pending.finish(flood[0].state, flood[0].state) is None  # dropped to stay within 3
    assert pending.finish(flood[-1].state, flood[-1].state) is flood[-1]
