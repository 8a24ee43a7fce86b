"""The ``[console]`` section: the browser console's sign-in and session limits.

Sign-in through the bank's IdP is the OpenID Connect authorization code flow with PKCE. The IdP
must also be one of ``auth.issuers`` with ``oidc_client_id`` among its audiences: the ID token
is verified by the same ``TokenVerifier`` as API tokens, so keys, algorithms, role mapping and
revocation are the API's.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import msgspec

from gateway.errors import ConfigError

__all__ = ["ConsoleConfig"]

_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


class ConsoleConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The web console under ``/console`` for compliance officers and administrators."""

    enabled: bool = True
    """Serve the console. It grants nothing by itself: every page checks the same RBAC as the API."""
    oidc_issuer: str | None = None
    """The IdP's issuer (exact ``iss``; its discovery document is ``<issuer>/.well-known/openid-configuration``).
    None: no single sign-on button. Must also be configured in ``auth.issuers``."""
    oidc_client_id: str = ""
    """The console's client id at the IdP; must be among that issuer's ``audiences``."""
    oidc_client_secret_env: str | None = None
    """Environment variable holding the client secret (confidential client). None: a public
    client that relies on PKCE alone."""
    oidc_redirect_url: str = ""
    """The callback URL registered at the IdP, e.g. ``https://gateway.bank.example/console/callback``."""
    oidc_scopes: tuple[str, ...] = ("openid",)
    """Scopes asked for; ``openid`` is always included."""
    dev_sign_in: bool = True
    """Offer signing in with a token of the built-in dev issuer (only while ``auth.dev_issuer`` is on)."""
    session_idle_s: int = 900
    """A session ends after this many seconds without a request."""
    session_absolute_s: int = 28800
    """A session ends this many seconds after sign-in, however active."""
    max_sessions: int = 10000
    """Sessions held at once when they live in this gateway's memory (no ``redis_url``); the oldest
    is ended to make room. With Redis, the time-outs bound them."""
    session_key_prefix: str = "strongroom:console:session"
    """Prefix of the Redis keys holding sessions (with ``redis_url``: every replica shares them)."""
    session_postgres_schema: str = "console"
    """Schema of the ``console_session`` table when sessions live in PostgreSQL (no ``redis_url``
    and ``access.backend = "postgres"``: in the policy's database, shared by every replica)."""
    secure_cookies: bool | None = None
    """Mark cookies ``Secure``. None: exactly when the gateway itself serves TLS; set true behind a
    TLS-terminating proxy."""

    def __post_init__(self) -> None:
        if self.session_idle_s <= 0 or self.session_absolute_s <= 0:
            raise ConfigError("console: session time-outs must be positive")
        if self.session_idle_s > self.session_absolute_s:
            raise ConfigError("console.session_idle_s must not exceed session_absolute_s")
        if self.max_sessions < 1:
            raise ConfigError("console.max_sessions must be >= 1")
        if not self.session_key_prefix:
            raise ConfigError("console.session_key_prefix must not be empty")
        if not self.session_postgres_schema.isidentifier():
            raise ConfigError("console.session_postgres_schema must be a plain identifier")
        if self.oidc_issuer is not None:
            self._check_oidc()

    def _check_oidc(self) -> None:
        if not self.oidc_issuer or not self.oidc_client_id or not self.oidc_redirect_url:
            raise ConfigError("console: oidc_issuer needs oidc_client_id and oidc_redirect_url")
        for name, url in (("oidc_issuer", self.oidc_issuer), ("oidc_redirect_url", self.oidc_redirect_url)):
            if not is_safe_url(url or ""):
                raise ConfigError(f"console.{name} must be https (http only on loopback)")
        if not urlsplit(self.oidc_redirect_url).path.endswith("/console/callback"):
            raise ConfigError("console.oidc_redirect_url must end in /console/callback")

    @property
    def has_oidc(self) -> bool:
        return self.oidc_issuer is not None


def is_safe_url(url: str) -> bool:
    """https anywhere, http only to a loopback host (tests, a local IdP)."""
    parts = urlsplit(url)
    return parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in _LOOPBACK_HOSTS)
