"""Callers of the guarded routes: dev-issuer tokens checked by a real TokenVerifier, and the
Gatekeeper an app installs to judge them."""

from __future__ import annotations

import tempfile
from pathlib import Path

from gateway.auditor import Auditor, ContentSink
from gateway.auth import AuthConfig, DevIssuer, TokenVerifier
from gateway.authenticator import Authenticator
from gateway.config import ServerConfig
from gateway.gatekeeper import Gatekeeper
from gateway.metrics_access import MetricsAccess
from gateway.telemetry_config import TelemetryConfig
from policies.authorizer import Authorizer

KEYS = Path(tempfile.mkdtemp(prefix="strongroom-test-callers-"))
"""The dev issuer's key, shared by every test of these modules (tokens are minted at import)."""
_ISSUER = DevIssuer.load_or_create(KEYS)


def bearer(sub: str, *roles: str, tenant: str | None = None) -> dict[str, str]:
    """Headers of a caller ``sub`` whose token carries ``roles``."""
    return {"authorization": f"Bearer {_ISSUER.mint(sub, roles, tenant=tenant)}"}


def gatekeeper(authorizer: Authorizer, sink: ContentSink) -> Gatekeeper:
    auditor = Auditor(sink)
    verifier = TokenVerifier.create(AuthConfig(revocation=False), KEYS, redis=None)
    metrics = MetricsAccess(TelemetryConfig(), ServerConfig(), {})
    return Gatekeeper(Authenticator(verifier, metrics, auditor), authorizer, auditor)
