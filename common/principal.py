"""The authenticated caller, as the gateway, the access policies and the audit trail see it."""

from __future__ import annotations

import msgspec


class Principal(msgspec.Struct, frozen=True, kw_only=True):
    """Who is calling, after the token has been verified. Holds no secret."""

    subject: str
    """The token's ``sub``."""
    roles: tuple[str, ...]
    """Roles after the IdP-group mapping; what RBAC decides on."""
    issuer: str
    """The token's ``iss``, one of the configured trusted issuers."""
    tenant: str | None = None
    """Business unit or tenant (RBAC domain); None when domains are not used."""
    client_id: str | None = None
    """The calling application (``azp`` or ``client_id`` claim)."""
    token_id: str | None = None
    """The token's ``jti``, when present."""
    expires_at: float = 0.0
    """The token's ``exp`` as a UNIX timestamp."""
