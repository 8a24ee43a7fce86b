"""VerifiedTokens: the exact token and the exact key object, forgotten at exp, bounded."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from gateway.auth.verified_tokens import VerifiedTokens

if TYPE_CHECKING:
    from conftest import FakeClock


def test_a_hit_is_the_same_token_with_the_key_object_that_verified_it(clock: FakeClock) -> None:
    key = object()
    tokens = VerifiedTokens(clock)
    tokens.remember("a.b.c", key, {"alg": "EdDSA"}, {"sub": "alice"}, expires_at=clock.now + 60)
    entry = tokens.find("a.b.c")
    assert entry is not None
    assert (entry.key, entry.header, entry.payload) == (key, {"alg": "EdDSA"}, {"sub": "alice"})
    assert tokens.find("a.b.d") is None


def test_an_entry_ends_at_its_expiry(clock: FakeClock) -> None:
    key = object()
    tokens = VerifiedTokens(clock)
    tokens.remember("t", key, {}, {}, expires_at=clock.now + 10)
    clock.advance(9.999)
    assert tokens.find("t") is not None
    clock.advance(0.001)
    assert tokens.find("t") is None
    assert len(tokens) == 0


def test_a_full_table_forgets_its_oldest_entry(clock: FakeClock) -> None:
    key = object()
    tokens = VerifiedTokens(clock, max_entries=2)
    for token in ("t1", "t2", "t3"):
        tokens.remember(token, key, {}, {"t": token}, expires_at=clock.now + 60)
    assert len(tokens) == 2
    assert tokens.find("t1") is None
    assert [tokens.find(t).payload for t in ("t2", "t3")] == [{"t": "t2"}, {"t": "t3"}]  # type: ignore[union-attr]


def test_size_must_be_positive(clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="max_entries"):
        VerifiedTokens(clock, max_entries=0)
