"""The keys one trusted issuer signs with: static files, a JWKS, or one HMAC secret.

``kid`` is only ever a dictionary key here: it is never joined into a path or a URL. A token
without ``kid`` is accepted only when exactly one of the issuer's keys fits its algorithm.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import httpx

from gateway.auth.config import IssuerConfig
from gateway.auth.errors import AuthConfigError, AuthenticationError
from gateway.auth.jwks import JwksCache, JwksUnavailableError, UnknownKeyError
from gateway.auth.verification_key import KeyFormatError, PublicKey, VerificationKey, load_key_file

__all__ = ["IssuerKeys"]

_MIN_HMAC_SECRET_BYTES = {"HS256": 32, "HS384": 48, "HS512": 64}


class IssuerKeys:
    """Looks up the verification key for a token of one issuer. Repr never shows a secret."""

    def __init__(
        self,
        config: IssuerConfig,
        *,
        static_keys: dict[str, VerificationKey],
        jwks: JwksCache | None,
        hmac_secret: bytes | None,
    ) -> None:
        self.config = config
        self._static_keys = static_keys
        self._jwks = jwks
        self._hmac_secret = hmac_secret

    def __repr__(self) -> str:
        return f"IssuerKeys(issuer={self.config.issuer!r}, num_static_keys={len(self._static_keys)})"

    @classmethod
    def load(
        cls,
        config: IssuerConfig,
        data_dir: Path,
        *,
        http: httpx.AsyncClient | None,
        clock: Callable[[], float],
    ) -> IssuerKeys:
        """Read key files and the HMAC secret now (errors at start-up); the JWKS is fetched lazily."""
        if config.is_hmac:
            return cls(config, static_keys={}, jwks=None, hmac_secret=_read_hmac_secret(config))
        static_keys: dict[str, VerificationKey] = {}
        for name in config.key_files:
            path = Path(name) if Path(name).is_absolute() else data_dir / name
            try:
                for key in load_key_file(path):
                    static_keys.setdefault(key.kid, key)
            except (OSError, ValueError, KeyError, KeyFormatError) as exc:
                raise AuthConfigError(
                    f"issuer {config.issuer!r}: cannot load key file {path}: {exc}"
                ) from exc
        jwks = None
        if config.jwks_url is not None:
            if http is None:
                raise AuthConfigError(f"issuer {config.issuer!r}: jwks_url needs an HTTP client")
            jwks = JwksCache(
                config.jwks_url,
                http,
                cache_s=config.jwks_cache_s,
                refetch_cooldown_s=config.jwks_refetch_cooldown_s,
                max_stale_s=config.jwks_max_stale_s,
                clock=clock,
            )
        return cls(config, static_keys=static_keys, jwks=jwks, hmac_secret=None)

    async def key_for(self, kid: str | None, alg: str) -> PublicKey | bytes:
        """The key to verify an ``alg`` signature with; raises ``AuthenticationError``."""
        if self._hmac_secret is not None:
            return self._hmac_secret
        key = await (self._find_by_kid(kid) if kid is not None else self._only_key_for(alg))
        if not key.fits(alg):
            raise AuthenticationError("key does not fit the token's algorithm")
        return key.key

    async def _find_by_kid(self, kid: str) -> VerificationKey:
        if kid in self._static_keys:
            return self._static_keys[kid]
        if self._jwks is None:
            raise AuthenticationError("unknown kid")
        try:
            return await self._jwks.key(kid)
        except UnknownKeyError:
            raise AuthenticationError("unknown kid") from None
        except JwksUnavailableError:
            raise AuthenticationError("JWKS unavailable") from None

    async def _only_key_for(self, alg: str) -> VerificationKey:
        candidates = list(self._static_keys.values())
        if self._jwks is not None:
            try:
                candidates.extend((await self._jwks.keys()).values())
            except JwksUnavailableError:
                if not candidates:
                    raise AuthenticationError("JWKS unavailable") from None
        fitting = [key for key in candidates if key.fits(alg)]
        if len(fitting) != 1:
            raise AuthenticationError("token has no kid and not exactly one issuer key fits")
        return fitting[0]


def _read_hmac_secret(config: IssuerConfig) -> bytes:
    """The secret from the environment, as long as the strongest configured HS* needs (RFC 7518 3.2)."""
    secret = os.environ.get(config.hmac_secret_env or "", "").encode()
    min_bytes = max(_MIN_HMAC_SECRET_BYTES[alg] for alg in config.algorithms)
    if len(secret) < min_bytes:
        raise AuthConfigError(
            f"issuer {config.issuer!r}: ${config.hmac_secret_env} must hold a secret of >= {min_bytes} bytes"
        )
    return secret
