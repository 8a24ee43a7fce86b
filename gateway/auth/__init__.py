"""Bearer-token authentication: trusted issuers, JWKS, the dev issuer and revocation."""

from gateway.auth.config import AuthConfig, IssuerConfig
from gateway.auth.dev_issuer import DevIssuer
from gateway.auth.errors import AuthConfigError, AuthenticationError, RevocationUnavailableError
from gateway.auth.revocation import RevocationList
from gateway.auth.token_verifier import TokenVerifier

__all__ = [
    "AuthConfig",
    "AuthConfigError",
    "AuthenticationError",
    "DevIssuer",
    "IssuerConfig",
    "RevocationList",
    "RevocationUnavailableError",
    "TokenVerifier",
]
