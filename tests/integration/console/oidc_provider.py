"""A small, real OpenID Connect provider for the console's browser tests, on a loopback port.

Authorization code flow only: discovery, JWKS (RS256), an HTML sign-in page where the tester
picks a user, and a token endpoint that enforces what a bank's IdP enforces: registered client
and redirect URI, single-use codes bound to that client and URI, PKCE S256 (RFC 7636), and the
nonce echoed in the ID token. Signing is pyjwt over a fresh RSA key, as a real IdP's would be.

(No maintained PyPI test provider fitted: ``oidc-provider-mock`` needs Python 3.12 from 0.4 on,
and its 0.3 line neither enforces PKCE nor issues ``jti``.)
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm


@dataclass
class OidcProvider:
    client_id: str
    redirect_uri: str
    users: dict[str, list[str]]
    """sub -> groups (the ``groups`` claim)."""
    issuer: str = ""
    key: Any = field(default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048))
    kid: str = field(default_factory=lambda: secrets.token_hex(8))
    requests: dict[str, dict[str, str]] = field(default_factory=dict)
    codes: dict[str, dict[str, str]] = field(default_factory=dict)
    token_calls: list[dict[str, str]] = field(default_factory=list)

    @property
    def jwks_url(self) -> str:
        return f"{self.issuer}/jwks"

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "jwks_uri": self.jwks_url,
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "code_challenge_methods_supported": ["S256"],
        }

    def jwks(self) -> dict[str, Any]:
        jwk = json.loads(RSAAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**jwk, "kid": self.kid, "alg": "RS256", "use": "sig"}]}

    def authorize(self, query: dict[str, str]) -> tuple[int, str]:
        """The sign-in page for a valid request, else 400 (never redirect to an unregistered URI)."""
        if query.get("client_id") != self.client_id or query.get("redirect_uri") != self.redirect_uri:
            return 400, "unknown client or redirect_uri"
        if query.get("response_type") != "code" or query.get("code_challenge_method") != "S256":
            return 400, "code flow with PKCE S256 only"
        if not query.get("code_challenge") or "openid" not in query.get("scope", "").split():
            return 400, "code_challenge and scope openid required"
        request_id = secrets.token_urlsafe(16)
        self.requests[request_id] = query
        options = "".join(
            f'<button name="sub" value="{html.escape(sub)}">{html.escape(sub)}</button>' for sub in self.users
        )
        page = (
            "<!doctype html><title>Bank IdP</title><h1>Bank IdP sign-in</h1>"
            f'<form method="post" action="/authorize"><input type="hidden" name="request" value="{request_id}">'
            f"{options}</form>"
        )
        return 200, page

    def approve(self, form: dict[str, str]) -> str:
        query = self.requests.pop(form.get("request", ""))
        code = secrets.token_urlsafe(24)
        self.codes[code] = {**query, "sub": form["sub"]}
        return f"{query['redirect_uri']}?{urlencode({'code': code, 'state': query.get('state', '')})}"

    def token(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        self.token_calls.append(form)
        grant = self.codes.pop(form.get("code", ""), None)
        if form.get("grant_type") != "authorization_code" or grant is None:
            return 400, {"error": "invalid_grant"}
        if form.get("client_id") != grant["client_id"] or form.get("redirect_uri") != grant["redirect_uri"]:
            return 400, {"error": "invalid_grant"}
        verifier = form.get("code_verifier", "")
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
        if not verifier or challenge != grant["code_challenge"]:
            return 400, {"error": "invalid_grant", "error_description": "PKCE verification failed"}
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "aud": self.client_id,
            "sub": grant["sub"],
            "iat": now,
            "exp": now + 300,
            "jti": secrets.token_urlsafe(12),
            "nonce": grant.get("nonce"),
            "groups": self.users[grant["sub"]],
        }
        id_token = jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": self.kid})
        return 200, {"access_token": secrets.token_urlsafe(24), "token_type": "Bearer", "id_token": id_token}


def _handler(provider: OidcProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(
            self, status: int, body: str, content_type: str, headers: dict[str, str] | None = None
        ) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _form(self) -> dict[str, str]:
            length = int(self.headers.get("content-length", "0"))
            return {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            if parts.path == "/.well-known/openid-configuration":
                self._send(200, json.dumps(provider.discovery()), "application/json")
            elif parts.path == "/jwks":
                self._send(200, json.dumps(provider.jwks()), "application/json")
            elif parts.path == "/authorize":
                status, page = provider.authorize({k: v[0] for k, v in parse_qs(parts.query).items()})
                self._send(status, page, "text/html")
            else:
                self._send(404, "not found", "text/plain")

        def do_POST(self) -> None:
            if self.path == "/authorize":
                self._send(302, "", "text/plain", {"location": provider.approve(self._form())})
            elif self.path == "/token":
                status, body = provider.token(self._form())
                self._send(status, json.dumps(body), "application/json", {"cache-control": "no-store"})
            else:
                self._send(404, "not found", "text/plain")

    return Handler


@contextmanager
def running_provider(provider: OidcProvider) -> Iterator[OidcProvider]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(provider))
    provider.issuer = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield provider
    finally:
        server.shutdown()
        server.server_close()
