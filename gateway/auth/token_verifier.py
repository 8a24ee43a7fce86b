"""Bearer-token verification: from a raw ``Authorization`` header to a ``Principal``, or a 401.

Order of checks (cheap and attacker-independent first; nothing trusted before the signature)::

    header "Bearer <jwt>" -> size <= max_token_bytes -> three base64url segments
    -> JOSE header: alg a string, not none; no jku/x5u/x5c/jwk/crit/b64
    -> unverified iss picks the issuer (exact string match)
    -> alg in that issuer's pinned list -> key by kid (a lookup key only)
    -> signature (pyjwt, algorithms=[alg]; skipped for a token this key already verified,
       see VerifiedTokens) -> claims (ClaimRules) -> revocation -> Principal

Every failure raises ``AuthenticationError``: the client sees "Invalid token", ``reason`` says why.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import jwt
from opentelemetry import metrics
from redis.asyncio import Redis

from common.principal import Principal
from gateway.auth.claim_rules import ClaimRules
from gateway.auth.config import AuthConfig
from gateway.auth.dev_issuer import DevIssuer
from gateway.auth.errors import AuthConfigError, AuthenticationError, RevocationUnavailableError
from gateway.auth.issuer_keys import IssuerKeys
from gateway.auth.revocation import RevocationList
from gateway.auth.verified_tokens import VerifiedTokens
from gateway.redis_pipe import RedisPipe

__all__ = ["TokenVerifier"]

_FORBIDDEN_HEADERS = ("jku", "x5u", "x5c", "jwk", "crit", "b64")
_SEGMENT = re.compile(r"[A-Za-z0-9_-]+")
_MAX_KID_CHARS = 256
_HTTP_TIMEOUT_S = 5.0


class TokenVerifier:
    """Verifies bearer tokens against the trusted issuers. One per gateway process."""

    def __init__(
        self,
        cfg: AuthConfig,
        issuers: dict[str, IssuerKeys],
        *,
        revocations: RevocationList | None,
        clock: Callable[[], float] = time.time,
        owned_http: httpx.AsyncClient | None = None,
    ) -> None:
        self._cfg = cfg
        self._issuers = issuers
        self._revocations = revocations
        self._clock = clock
        self._rules = ClaimRules(cfg)
        self._owned_http = owned_http
        # pyjwt compares HMAC signatures in constant time (hmac.compare_digest).
        self._jws = jwt.PyJWS(options={"enforce_minimum_key_length": True})
        self._verified = VerifiedTokens(clock)
        self._failures = metrics.get_meter("strongroom.auth").create_counter(
            "strongroom.auth.failures", description="Rejected bearer tokens, by reason"
        )

    def __repr__(self) -> str:
        return f"TokenVerifier(issuers={sorted(self._issuers)!r})"

    @classmethod
    def create(
        cls,
        cfg: AuthConfig,
        data_dir: Path | str,
        *,
        redis: Redis | RedisPipe | None,
        http: httpx.AsyncClient | None = None,
        clock: Callable[[], float] = time.time,
    ) -> TokenVerifier:
        """Build from config (plain, not async: reads key files and secrets now, fails fast).

        Without ``http`` a client is created when some issuer has a ``jwks_url`` and closed by
        ``aclose()``; a given client stays the caller's. Revocations go to ``redis`` when given,
        else to ``<data_dir>/auth/revocations.db``.
        """
        data_dir = Path(data_dir)
        issuer_configs = list(cfg.issuers)
        if cfg.dev_issuer:
            dev_config = DevIssuer.load_or_create(data_dir).issuer_config()
            if any(issuer.issuer == dev_config.issuer for issuer in issuer_configs):
                raise AuthConfigError(f"issuer {dev_config.issuer!r} is reserved for the dev issuer")
            issuer_configs.append(dev_config)
        owned_http = None
        if http is None and any(issuer.jwks_url for issuer in issuer_configs):
            http = owned_http = httpx.AsyncClient(timeout=_HTTP_TIMEOUT_S, follow_redirects=False)
        issuers = {
            issuer.issuer: IssuerKeys.load(issuer, data_dir, http=http, clock=clock)
            for issuer in issuer_configs
        }
        revocations = RevocationList.open(cfg, data_dir, redis=redis, clock=clock) if cfg.revocation else None
        return cls(cfg, issuers, revocations=revocations, clock=clock, owned_http=owned_http)

    async def verify(self, authorization: str | None) -> Principal:
        """The caller of a request with this ``Authorization`` header; raises ``AuthenticationError``."""
        try:
            return await self._verify(authorization)
        except AuthenticationError as exc:
            # Reasons are a fixed vocabulary (no token content), so the label set stays small.
            self._failures.add(1, {"reason": exc.reason})
            raise

    async def _verify(self, authorization: str | None) -> Principal:
        token = self._bearer_token(authorization)
        known = self._verified.find(token)
        header, unverified = (known.header, known.payload) if known is not None else _decode_unverified(token)
        alg = _checked_alg(header)
        issuer_name = unverified.get("iss")
        issuer = self._issuers.get(issuer_name) if isinstance(issuer_name, str) else None
        if issuer is None:
            raise AuthenticationError("untrusted issuer")
        if alg not in issuer.config.algorithms:
            raise AuthenticationError("algorithm not allowed for issuer")
        kid = header.get("kid")
        if kid is not None and (not isinstance(kid, str) or not kid or len(kid) > _MAX_KID_CHARS):
            raise AuthenticationError("malformed kid")
        key = await issuer.key_for(kid, alg)
        is_new = known is None or known.key is not key
        payload = self._verified_payload(token, key, alg) if is_new else unverified
        self._rules.check(payload, issuer.config, now=self._clock())
        await self._check_revocation(payload)
        if is_new:
            self._verified.remember(
                token, key, header, payload, expires_at=payload["exp"] + self._cfg.leeway_s
            )
        return self._rules.principal(payload, issuer.config)

    async def is_revoked(self, principal: Principal, *, since: float) -> bool:
        """Whether the token behind a session begun at ``since`` has been revoked (by its jti, or
        its subject since then). An unreachable store counts as revoked unless configured fail-open."""
        if self._revocations is None:
            return False
        try:
            hit = await self._revocations.find(
                jti=principal.token_id, subject=principal.subject, issued_at=since
            )
        except RevocationUnavailableError:
            return not self._cfg.revocation_fail_open
        return hit is not None

    def _verified_payload(self, token: str, key: Any, alg: str) -> dict[str, Any]:
        try:
            payload = json.loads(self._jws.decode(token, key=key, algorithms=[alg]))
        except jwt.InvalidSignatureError:
            raise AuthenticationError("bad signature") from None
        except (jwt.PyJWTError, ValueError, TypeError) as exc:
            raise AuthenticationError(f"signature check failed: {type(exc).__name__}") from None
        if not isinstance(payload, dict):
            raise AuthenticationError("payload is not a JSON object")
        return payload

    async def aclose(self) -> None:
        """Close the HTTP client and revocation store this verifier opened itself."""
        if self._owned_http is not None:
            await self._owned_http.aclose()
        if self._revocations is not None:
            await self._revocations.aclose()

    def _bearer_token(self, authorization: str | None) -> str:
        if not authorization:
            raise AuthenticationError("missing Authorization header")
        if len(authorization) > self._cfg.max_token_bytes + len("Bearer "):
            raise AuthenticationError("token too large")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise AuthenticationError("not a Bearer token")
        if len(token.encode()) > self._cfg.max_token_bytes:
            raise AuthenticationError("token too large")
        return token

    async def _check_revocation(self, payload: dict[str, Any]) -> None:
        if self._revocations is None:
            return
        try:
            hit = await self._revocations.find(
                jti=payload.get("jti"), subject=payload["sub"], issued_at=float(payload["iat"])
            )
        except RevocationUnavailableError:
            if self._cfg.revocation_fail_open:
                return
            raise  # 503: an outage, not a bad token (the signature and claims already passed)
        if hit == "jti":
            raise AuthenticationError("token revoked (jti)")
        if hit == "subject":
            raise AuthenticationError("subject revoked before this token's iat")


def _decode_unverified(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Header and payload as JSON objects, without trusting either; only for routing."""
    segments = token.split(".")
    if len(segments) != 3 or not all(_SEGMENT.fullmatch(segment) for segment in segments):
        raise AuthenticationError("not a compact JWS")
    try:
        header, payload = (json.loads(_b64url_decode(segment)) for segment in segments[:2])
    except (ValueError, binascii.Error, RecursionError):
        raise AuthenticationError("undecodable header or payload") from None
    if not isinstance(header, dict) or not isinstance(payload, dict):
        raise AuthenticationError("header or payload is not a JSON object")
    return header, payload


def _checked_alg(header: dict[str, Any]) -> str:
    for name in _FORBIDDEN_HEADERS:
        if name in header:
            raise AuthenticationError(f"forbidden header {name}")
    alg = header.get("alg")
    if not isinstance(alg, str) or not alg:
        raise AuthenticationError("missing alg")
    if alg.lower() == "none":
        raise AuthenticationError("alg none")
    return alg


def _b64url_decode(segment: str) -> bytes:
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
