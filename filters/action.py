"""What the filter does with a finding."""

from __future__ import annotations

import enum


class Action(enum.StrEnum):
    BLOCK = "block"
    """Reject the request (400 ``content_policy_violation``) or end the stream."""
    REDACT = "redact"
    """Replace the value with ``[REDACTED:TYPE]``."""
    MASK = "mask"
    """Keep a recognisable edge of the value, e.g. ``6222 **** **** 1234``."""
    FLAG = "flag"
    """Leave the text alone; record the finding for the audit log."""
    OFF = "off"
    """Do not run the detector."""

    @property
    def rewrites(self) -> bool:
        return self in _REWRITING  # a set: read per detector each time a stream is set up


_REWRITING = frozenset({Action.BLOCK, Action.REDACT, Action.MASK})


class Direction(enum.StrEnum):
    REQUEST = "request"
    RESPONSE = "response"
