"""Configuration of bearer-token authentication: which issuers are trusted and how strictly.

Algorithms are pinned here per issuer and never taken from a token. An issuer is either asymmetric
(keys from a JWKS URL and/or PEM/JWK files) or HMAC (one shared secret read from an environment
variable); never both, so a public key can never end up being used as an HMAC secret.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import msgspec

from gateway.auth.errors import AuthConfigError

__all__ = ["ASYMMETRIC_ALGORITHMS", "HMAC_ALGORITHMS", "AuthConfig", "IssuerConfig"]

ASYMMETRIC_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
HMAC_ALGORITHMS = frozenset({"HS256", "HS384", "HS512"})
_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
_MAX_SAFE_LEEWAY_S = 30


class IssuerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One trusted token issuer (an IdP realm, or the built-in dev issuer)."""

    issuer: str
    """Exact ``iss`` value; compared as a whole string, never by prefix or substring."""
    audiences: tuple[str, ...]
    """Accepted ``aud`` values; a token must name at least one of them."""
    algorithms: tuple[str, ...] = ("RS256", "PS256", "ES256", "EdDSA")
    """Allowed ``alg`` values for this issuer. HS* only together with ``hmac_secret_env``."""
    jwks_url: str | None = None
    """JWKS endpoint (https, or http on a loopback host only)."""
    key_files: tuple[str, ...] = ()
    """Static public keys: PEM files, or JSON files holding a JWK or a JWKS. Relative to data_dir."""
    hmac_secret_env: str | None = None
    """Name of the environment variable holding the HS* secret; the secret is never in config."""
    roles_claim: str = "roles"
    """Claim holding the roles or groups; a dotted path such as ``realm_access.roles`` is followed."""
    role_mapping: dict[str, str] = {}
    """IdP group -> Strongroom role. When non-empty, groups without a mapping grant nothing."""
    tenant_claim: str | None = None
    """Claim (dotted path allowed) holding the tenant / business unit; None when domains are unused."""
    jwks_cache_s: float = 300.0
    """How long a fetched JWKS is used before it is fetched again."""
    jwks_refetch_cooldown_s: float = 30.0
    """Minimum time between two fetches (unknown kid, refresh after expiry, or retry after failure)."""
    jwks_max_stale_s: float = 3600.0
    """During a JWKS outage, cached keys stay usable this long after the last good fetch; then deny."""

    def __post_init__(self) -> None:
        if not self.issuer:
            raise AuthConfigError("issuer must not be empty")
        where = f"issuer {self.issuer!r}"
        if not self.audiences or any(not audience for audience in self.audiences):
            raise AuthConfigError(f"{where}: audiences must be a non-empty list of non-empty strings")
        if not self.algorithms:
            raise AuthConfigError(f"{where}: algorithms must not be empty")
        unknown = set(self.algorithms) - ASYMMETRIC_ALGORITHMS - HMAC_ALGORITHMS
        if unknown:
            raise AuthConfigError(f"{where}: unsupported algorithms {sorted(unknown)}")
        if self.is_hmac:
            self._check_hmac(where)
        else:
            self._check_asymmetric(where)
        if not self.roles_claim:
            raise AuthConfigError(f"{where}: roles_claim must not be empty")
        if any(not group or not role for group, role in self.role_mapping.items()):
            raise AuthConfigError(f"{where}: role_mapping entries must be non-empty")
        if self.tenant_claim == "":
            raise AuthConfigError(f"{where}: tenant_claim must be None or non-empty")
        if min(self.jwks_cache_s, self.jwks_refetch_cooldown_s, self.jwks_max_stale_s) <= 0:
            raise AuthConfigError(f"{where}: JWKS timings must be positive")
        if self.jwks_max_stale_s < self.jwks_cache_s:
            raise AuthConfigError(f"{where}: jwks_max_stale_s must be >= jwks_cache_s")

    @property
    def is_hmac(self) -> bool:
        """Whether tokens of this issuer are HMAC-signed with a shared secret."""
        return self.hmac_secret_env is not None

    def _check_hmac(self, where: str) -> None:
        if not set(self.algorithms) <= HMAC_ALGORITHMS:
            raise AuthConfigError(f"{where}: an HMAC issuer allows only HS256/HS384/HS512")
        if self.jwks_url or self.key_files:
            raise AuthConfigError(f"{where}: an HMAC issuer takes no jwks_url or key_files")
        if not self.hmac_secret_env:
            raise AuthConfigError(f"{where}: hmac_secret_env must name an environment variable")

    def _check_asymmetric(self, where: str) -> None:
        if set(self.algorithms) & HMAC_ALGORITHMS:
            raise AuthConfigError(f"{where}: HS* algorithms need hmac_secret_env")
        if not self.jwks_url and not self.key_files:
            raise AuthConfigError(f"{where}: needs jwks_url or key_files")
        if self.jwks_url is not None:
            url = urlsplit(self.jwks_url)
            is_loopback_http = url.scheme == "http" and url.hostname in _LOOPBACK_HOSTS
            if url.scheme != "https" and not is_loopback_http:
                raise AuthConfigError(f"{where}: jwks_url must be https (http only on loopback)")


class AuthConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``[auth]`` section: trusted issuers and the checks applied to every token."""

    issuers: tuple[IssuerConfig, ...] = ()
    """Trusted issuers; the unverified ``iss`` picks one by exact match."""
    dev_issuer: bool = True
    """Also trust the built-in dev issuer (key under data_dir/keys). Turn off in production."""
    leeway_s: int = 30
    """Clock skew tolerated on exp, nbf and iat. At most 30 unless ``allow_large_leeway``."""
    allow_large_leeway: bool = False
    """Permit a leeway above 30 s (only for IdPs with badly synchronised clocks)."""
    max_token_bytes: int = 8192
    """Longest accepted token; larger ones are rejected before any parsing."""
    max_lifetime_s: int = 86400
    """Longest accepted exp - iat."""
    require_jti: bool = False
    """Require a ``jti`` claim even when revocation is off (revocation on always requires it)."""
    revocation: bool = True
    """Check every token against the revocation list (by jti and by subject-before-time)."""
    revocation_fail_open: bool = False
    """Accept tokens when the revocation store is unreachable. Default: deny (fail closed)."""
    revocation_key_prefix: str = "strongroom:auth:revoked:"
    """Redis key prefix for revocation entries (when a Redis client is configured)."""

    def __post_init__(self) -> None:
        if self.leeway_s < 0:
            raise AuthConfigError("auth.leeway_s must be >= 0")
        if self.leeway_s > _MAX_SAFE_LEEWAY_S and not self.allow_large_leeway:
            raise AuthConfigError("auth.leeway_s above 30 needs auth.allow_large_leeway = true")
        if self.max_token_bytes < 256:
            raise AuthConfigError("auth.max_token_bytes must be >= 256")
        if self.max_lifetime_s <= 0:
            raise AuthConfigError("auth.max_lifetime_s must be positive")
        if not self.revocation_key_prefix:
            raise AuthConfigError("auth.revocation_key_prefix must not be empty")
        names = [issuer.issuer for issuer in self.issuers]
        if len(names) != len(set(names)):
            raise AuthConfigError("auth.issuers: each issuer may appear only once")

    @property
    def requires_jti(self) -> bool:
        """Whether tokens without ``jti`` are rejected (revocation by jti needs one)."""
        return self.require_jti or self.revocation
