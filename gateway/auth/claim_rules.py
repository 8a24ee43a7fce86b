"""What a verified payload must say before it becomes a ``Principal``.

Required: ``exp``, ``iat``, ``sub``, ``iss``, ``aud`` (and ``jti`` when revocation or config asks).
Times are finite numbers (``NaN`` and ``Infinity`` parse as JSON numbers and would defeat every
comparison), checked against the injected clock with the configured leeway::

    iat <= now + leeway      nbf <= now + leeway      now < exp + leeway
    0 < exp - iat <= max_lifetime_s
"""

from __future__ import annotations

import math
from typing import Any

from common.principal import Principal
from gateway.auth.config import AuthConfig, IssuerConfig
from gateway.auth.errors import AuthenticationError

__all__ = ["ClaimRules", "read_claim"]

_REQUIRED = ("exp", "iat", "sub", "iss", "aud")
_MISSING = object()


class ClaimRules:
    """Checks registered claims and maps the rest (roles, tenant, client) onto a ``Principal``."""

    def __init__(self, cfg: AuthConfig) -> None:
        self._leeway_s = cfg.leeway_s
        self._max_lifetime_s = cfg.max_lifetime_s
        self._required = (*_REQUIRED, "jti") if cfg.requires_jti else _REQUIRED

    def check(self, payload: dict[str, Any], issuer: IssuerConfig, *, now: float) -> None:
        """Raise ``AuthenticationError`` unless the payload is acceptable at ``now``."""
        for name in self._required:
            if payload.get(name) is None:
                raise AuthenticationError(f"missing claim {name}")
        if payload["iss"] != issuer.issuer:
            raise AuthenticationError("issuer mismatch")
        subject = payload["sub"]
        if not isinstance(subject, str) or not subject:
            raise AuthenticationError("sub is not a non-empty string")
        jti = payload.get("jti")
        if jti is not None and (not isinstance(jti, str) or not jti):
            raise AuthenticationError("jti is not a non-empty string")
        self._check_audience(payload["aud"], issuer)
        self._check_times(payload, now)

    def principal(self, payload: dict[str, Any], issuer: IssuerConfig) -> Principal:
        """The caller described by a checked payload."""
        tenant = read_claim(payload, issuer.tenant_claim) if issuer.tenant_claim else None
        client_id = payload.get("azp", payload.get("client_id"))
        return Principal(
            subject=payload["sub"],
            roles=_roles(read_claim(payload, issuer.roles_claim), issuer.role_mapping),
            issuer=issuer.issuer,
            tenant=tenant if isinstance(tenant, str) and tenant else None,
            client_id=client_id if isinstance(client_id, str) and client_id else None,
            token_id=payload.get("jti"),
            expires_at=float(payload["exp"]),
        )

    def _check_audience(self, aud: object, issuer: IssuerConfig) -> None:
        audiences = [aud] if isinstance(aud, str) else aud
        if not isinstance(audiences, list) or not all(isinstance(item, str) for item in audiences):
            raise AuthenticationError("aud is not a string or a list of strings")
        if not set(audiences) & set(issuer.audiences):
            raise AuthenticationError("audience not accepted")

    def _check_times(self, payload: dict[str, Any], now: float) -> None:
        issued_at = _timestamp(payload, "iat")
        expires_at = _timestamp(payload, "exp")
        if issued_at > now + self._leeway_s:
            raise AuthenticationError("iat in the future")
        if "nbf" in payload and _timestamp(payload, "nbf") > now + self._leeway_s:
            raise AuthenticationError("not yet valid (nbf)")
        if now >= expires_at + self._leeway_s:
            raise AuthenticationError("expired")
        lifetime = expires_at - issued_at
        if lifetime <= 0:
            raise AuthenticationError("exp not after iat")
        if lifetime > self._max_lifetime_s:
            raise AuthenticationError("lifetime exceeds max_lifetime_s")


def read_claim(payload: dict[str, Any], path: str) -> object:
    """The claim at ``path``: an exact top-level name first (``https://idp/roles``), else dotted."""
    if path in payload:
        return payload[path]
    value: object = payload
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part, _MISSING)
        if value is _MISSING:
            return None
    return value


def _timestamp(payload: dict[str, Any], name: str) -> float:
    value = payload[name]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise AuthenticationError(f"{name} is not a finite number")
    return float(value)


def _roles(value: object, mapping: dict[str, str]) -> tuple[str, ...]:
    """Roles from a string or a list of strings; with a mapping, unmapped groups grant nothing."""
    groups = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    names = [group for group in groups if isinstance(group, str) and group]
    if mapping:
        names = [mapping[name] for name in names if name in mapping]
    return tuple(dict.fromkeys(names))
