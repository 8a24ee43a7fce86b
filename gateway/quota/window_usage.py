"""What a limiter backend reports after a reservation attempt, in one fixed window."""

from __future__ import annotations

import enum

import msgspec

__all__ = ["Verdict", "WindowUsage"]


class Verdict(enum.IntEnum):
    ADMITTED = 0
    REQUESTS = 1
    TOKENS = 2
    CONCURRENCY = 3


class WindowUsage(msgspec.Struct, frozen=True, kw_only=True):
    verdict: Verdict
    requests: int
    """Requests counted in the window, this one included when admitted."""
    tokens: int
    """Tokens reserved or used in the window, this request's reservation included when admitted."""
    in_flight: int
    """Concurrency slots held, this request's included when admitted."""
