"""Values that cross the seam between the gateway and the filter."""

from __future__ import annotations

import msgspec

from common.finding import Finding


class FilterContext(msgspec.Struct, frozen=True, kw_only=True):
    roles: tuple[str, ...] = ()
    """The caller's roles (``Principal.roles``)."""
    model: str = ""
    """The model the request is for."""


class FilterResult(msgspec.Struct, frozen=True, kw_only=True):
    blocked: bool
    """True when a ``block`` action fired or a detector failed under ``on_error = "block"``."""
    texts: list[str]
    """The texts with redactions and masks applied, in input order. Values of blocking findings
    are redacted too, so the texts are safe to log even when blocked."""
    findings: tuple[Finding, ...]
    """Per (type, action): how many, never the values."""

    def __repr__(self) -> str:
        return (
            f"FilterResult(blocked={self.blocked}, num_texts={len(self.texts)}, findings={self.findings!r})"
        )


class StreamStep(msgspec.Struct, frozen=True, kw_only=True):
    release: str
    """Text now safe to send to the client (may be empty while characters are held back)."""
    blocked: bool
    """The stream hit a block: send nothing more; end it with ``finish_reason: content_filter``."""

    def __repr__(self) -> str:
        return f"StreamStep(release_len={len(self.release)}, blocked={self.blocked})"


class Hit(msgspec.Struct, frozen=True, kw_only=True):
    """One finding with its position in the original text, for policy owners (CLI), not audit."""

    type: str
    start: int
    end: int
    action: str
