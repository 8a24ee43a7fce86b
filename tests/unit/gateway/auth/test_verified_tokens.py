"""VerifiedTokens: the exact token and the exact key object, forgotten at exp, bounded."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from gateway.auth.verified_tokens import VerifiedTokens

if TYPE_CHECKING:
    from conftest import FakeClock


def test_a_hit_needs_the_same_token_and_the_same_key_object(clock: FakeClock) -> None:
    key, other_key = object(), object()
    tokens = VerifiedTokens(clock)
    tokens.remember("a.b.c", key, {"sub": "alice"}, expires_at=clock.now + 60)
    assert tokens.payload("a.b.c", key) == {"sub": "alice"}
    assert tokens.payload("a.b.d", key) is None
    assert tokens.payload("a.b.c", other_key) is None
    # A key that no longer matches also drops the entry: the next lookup with the old key misses.
    assert tokens.payload("a.b.c", key) is None
    assert len(tokens) == 0


def test_an_entry_ends_at_its_expiry(clock: FakeClock) -> None:
    key = object()
    tokens = VerifiedTokens(clock)
    tokens.remember("t", key, {}, expires_at=clock.now + 10)
    clock.advance(9.999)
    assert tokens.payload("t", key) == {}
    clock.advance(0.001)
    assert tokens.payload("t", key) is None
    assert len(tokens) == 0


def test_a_full_table_forgets_its_oldest_entry(clock: FakeClock) -> None:
    key = object()
    tokens = VerifiedTokens(clock, max_entries=2)
    for token in ("t1", "t2", "t3"):
        tokens.remember(token, key, {"t": token}, expires_at=clock.now + 60)
    assert len(tokens) == 2
    assert tokens.payload("t1", key) is None
    assert tokens.payload("t2", key) == {"t": "t2"} and tokens.payload("t3", key) == {"t": "t3"}


def test_size_must_be_positive(clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="max_entries"):
        VerifiedTokens(clock, max_entries=0)
