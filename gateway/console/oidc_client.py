"""The console's OpenID Connect relying party: discovery, the authorization URL, the code exchange.

The ID token is verified by the gateway's ``TokenVerifier`` (the IdP is one of ``auth.issuers``),
so signature, algorithms, audience, lifetime, role mapping and revocation are exactly the API's;
only the nonce, which binds the token to this sign-in, is checked here. The discovery document
must name the same issuer and the same JWKS URL as the configuration: a document that points
elsewhere is refused rather than trusted.
"""

from __future__ import annotations

import hmac
import os
from typing import Any
from urllib.parse import urlencode

import httpx
import jwt
import msgspec

from common.principal import Principal
from gateway.auth.config import AuthConfig
from gateway.auth.errors import AuthenticationError
from gateway.auth.token_verifier import TokenVerifier
from gateway.console.config import ConsoleConfig, is_safe_url
from gateway.console.pending_sign_ins import PendingSignIn
from gateway.errors import ConfigError

__all__ = ["OidcClient", "SignInError"]

_TIMEOUT_S = 5.0
_MAX_DOCUMENT_BYTES = 1 << 20


class SignInError(Exception):
    """A sign-in that cannot complete; ``reason`` goes to the audit log, the officer sees a generic page."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ProviderMetadata(msgspec.Struct, frozen=True, kw_only=True):
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    code_challenge_methods_supported: list[str] | None = None


class OidcClient:
    def __init__(self, cfg: ConsoleConfig, auth: AuthConfig, verifier: TokenVerifier) -> None:
        assert cfg.oidc_issuer is not None
        issuer = next((i for i in auth.issuers if i.issuer == cfg.oidc_issuer), None)
        if issuer is None:
            raise ConfigError(f"console.oidc_issuer {cfg.oidc_issuer!r} must also be one of auth.issuers")
        if cfg.oidc_client_id not in issuer.audiences:
            raise ConfigError("console.oidc_client_id must be among that issuer's audiences")
        if cfg.oidc_client_secret_env and not os.environ.get(cfg.oidc_client_secret_env):
            raise ConfigError(f"${cfg.oidc_client_secret_env} must hold the console's client secret")
        self._cfg = cfg
        self._issuer = cfg.oidc_issuer
        self._jwks_url = issuer.jwks_url
        self._verifier = verifier
        self._secret = os.environ.get(cfg.oidc_client_secret_env) if cfg.oidc_client_secret_env else None
        self._metadata: ProviderMetadata | None = None

    def __repr__(self) -> str:
        return f"OidcClient(issuer={self._issuer!r}, client_id={self._cfg.oidc_client_id!r})"

    async def authorization_url(self, pending: PendingSignIn) -> str:
        metadata = await self._discover()
        scopes = dict.fromkeys(("openid", *self._cfg.oidc_scopes))
        query = urlencode(
            {
                "response_type": "code",
                "client_id": self._cfg.oidc_client_id,
                "redirect_uri": self._cfg.oidc_redirect_url,
                "scope": " ".join(scopes),
                "state": pending.state,
                "nonce": pending.nonce,
                "code_challenge": pending.code_challenge,
                "code_challenge_method": "S256",
            }
        )
        separator = "&" if "?" in metadata.authorization_endpoint else "?"
        return f"{metadata.authorization_endpoint}{separator}{query}"

    async def finish(self, code: str, pending: PendingSignIn) -> Principal:
        """Exchange ``code`` (with the PKCE verifier) and verify the ID token; raises ``SignInError``."""
        metadata = await self._discover()
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self._cfg.oidc_redirect_url,
            "client_id": self._cfg.oidc_client_id,
            "code_verifier": pending.code_verifier,
        }
        auth = httpx.BasicAuth(self._cfg.oidc_client_id, self._secret) if self._secret else None
        try:
            async with httpx.AsyncClient(timeout=_TIMEOUT_S, follow_redirects=False, auth=auth) as http:
                response = await http.post(metadata.token_endpoint, data=form)
        except httpx.HTTPError as exc:
            raise SignInError(f"token endpoint unreachable: {type(exc).__name__}") from None
        if response.status_code != 200:
            raise SignInError(f"token endpoint answered {response.status_code}")
        body = _json_object(response.content)
        id_token = body.get("id_token") if body else None
        if not isinstance(id_token, str):
            raise SignInError("token response has no id_token")
        try:
            principal = await self._verifier.verify(f"Bearer {id_token}")
        except AuthenticationError as exc:
            raise SignInError(f"id_token rejected: {exc.reason}") from None
        # Safe only after verify() above has checked the signature and claims of this very token.
        claims = jwt.decode(id_token, options={"verify_signature": False})
        nonce = claims.get("nonce")
        if not isinstance(nonce, str) or not hmac.compare_digest(nonce.encode(), pending.nonce.encode()):
            raise SignInError("id_token nonce does not match this sign-in")
        if principal.issuer != self._issuer:
            raise SignInError("id_token from another issuer")
        return principal

    async def _discover(self) -> ProviderMetadata:
        if self._metadata is not None:
            return self._metadata
        url = f"{self._issuer.rstrip('/')}/.well-known/openid-configuration"
        try:
            async with httpx.AsyncClient(timeout=_TIMEOUT_S, follow_redirects=False) as http:
                response = await http.get(url)
        except httpx.HTTPError as exc:
            raise SignInError(f"discovery unreachable: {type(exc).__name__}") from None
        if response.status_code != 200 or len(response.content) > _MAX_DOCUMENT_BYTES:
            raise SignInError(f"discovery answered {response.status_code}")
        try:
            metadata = msgspec.json.decode(response.content, type=ProviderMetadata)
        except msgspec.DecodeError as exc:
            raise SignInError(f"discovery document unreadable: {exc}") from None
        self._check(metadata)
        self._metadata = metadata
        return metadata

    def _check(self, metadata: ProviderMetadata) -> None:
        if metadata.issuer != self._issuer:
            raise SignInError("discovery names another issuer")
        if self._jwks_url is not None and metadata.jwks_uri != self._jwks_url:
            raise SignInError("discovery names another jwks_uri than auth.issuers")
        methods = metadata.code_challenge_methods_supported
        if methods is not None and "S256" not in methods:
            raise SignInError("IdP does not support PKCE S256")
        for endpoint in (metadata.authorization_endpoint, metadata.token_endpoint):
            if not is_safe_url(endpoint):
                raise SignInError("IdP endpoint is not https")


def _json_object(content: bytes) -> dict[str, Any] | None:
    try:
        value = msgspec.json.decode(content)
    except msgspec.DecodeError:
        return None
    return value if isinstance(value, dict) else None
