"""Errors of the authentication layer, on top of the gateway's error hierarchy.

Whatever went wrong with a token, the client hears the same thing: ``Invalid token`` with a 401.
The precise cause travels on the exception (``reason``) into the audit record, never into the
response, so a caller cannot probe which check it tripped.
"""

from __future__ import annotations

from gateway.errors import ConfigError, GatewayError, UnauthenticatedError

__all__ = ["AuthConfigError", "AuthError", "AuthenticationError", "RevocationUnavailableError"]


class AuthError(GatewayError):
    """Base of the errors raised by ``gateway.auth`` (except the token error, see below)."""


class AuthenticationError(UnauthenticatedError):
    """A bearer token was missing, malformed, untrusted, expired or revoked.

    ``str()`` and ``message`` are always "Invalid token"; ``reason`` is for the audit trail only.
    """

    def __repr__(self) -> str:
        return f"AuthenticationError(reason={self.reason!r})"


class AuthConfigError(ConfigError):
    """The auth configuration or key material is unusable; raised at start-up, never per request.

    A ``ValueError`` (via ``ConfigError``) so msgspec reports it while decoding the settings.
    """


class RevocationUnavailableError(AuthError):
    """The revocation store could not be read or written (Redis down, SQLite locked or broken).

    A 503 with ``Retry-After``, never a 401: the token may be fine, and clients and load
    balancers must read an outage as one (retry, fail over), not as bad credentials.
    """

    status_code = 503
    type = "server_error"
    code = "revocation_unavailable"

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"retry-after": RETRY_AFTER_S})


RETRY_AFTER_S = "2"
"""Seconds a client should wait after a dependency outage (Redis, the revocation list)."""
