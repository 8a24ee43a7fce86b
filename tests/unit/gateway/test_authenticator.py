"""Authenticator: a bearer token verified once per request, every refusal recorded first."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from common.audit_event import AuditEvent, Decision, EventType
from gateway.auditor import Auditor
from gateway.auth import AuthConfig, DevIssuer, RevocationUnavailableError, TokenVerifier
from gateway.authenticator import Authenticator
from gateway.config import ServerConfig
from gateway.errors import UnauthenticatedError
from gateway.metrics_access import MetricsAccess
from gateway.request_context import RequestContext
from gateway.telemetry_config import TelemetryConfig

SCRAPE = "scrape-token-of-a-decent-length"


class ListSink:
    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    async def append(self, event: AuditEvent) -> int:
        self.events.append(event)
        return len(self.events)


def _authenticator(verifier: TokenVerifier, sink: ListSink) -> Authenticator:
    metrics = MetricsAccess(
        TelemetryConfig(), ServerConfig(host="0.0.0.0"), {"STRONGROOM_METRICS_TOKEN": SCRAPE}
    )
    return Authenticator(verifier, metrics, Auditor(sink))


def test_a_caller_is_verified_once_per_request(tmp_path: Path) -> None:
    sink = ListSink()
    verifier = TokenVerifier.create(AuthConfig(revocation=False), tmp_path, redis=None)
    authenticator = _authenticator(verifier, sink)
    token = DevIssuer.load_or_create(tmp_path).mint("ann", ["analyst"], tenant="retail")

    async def go() -> None:
        ctx = RequestContext(request_id="r1", endpoint="/admin/policy")
        first = await authenticator.caller(ctx, f"Bearer {token}")
        assert (first.subject, first.roles, first.tenant) == ("ann", ("analyst",), "retail")
        # The guard asked first; the handler's dependency reads the same principal back.
        assert await authenticator.caller(ctx, None) is first
        with pytest.raises(UnauthenticatedError) as refused:
            await authenticator.caller(
                RequestContext(request_id="r2", endpoint="/admin/policy"), "Bearer x.y.z"
            )
        assert str(refused.value) == "Invalid token"

    asyncio.run(go())
    assert [(e.event_type, e.decision, e.status, e.request_id) for e in sink.events] == [
        (EventType.AUTHENTICATION_FAILURE, Decision.DENY, 401, "r2")
    ]


def test_an_unreachable_revocation_list_is_a_recorded_503(tmp_path: Path) -> None:
    sink = ListSink()
    token = DevIssuer.load_or_create(tmp_path).mint("ann", ["analyst"])

    async def go() -> None:
        # Nothing listens on port 1: the revocation check cannot be made, so no caller is admitted.
        redis = Redis.from_url("redis://127.0.0.1:1", socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
        verifier = TokenVerifier.create(AuthConfig(), tmp_path, redis=redis)
        with pytest.raises(RevocationUnavailableError):
            await _authenticator(verifier, sink).caller(
                RequestContext(request_id="r1", endpoint="/v1/models"), f"Bearer {token}"
            )
        await redis.aclose()

    asyncio.run(go())
    assert [(e.event_type, e.decision, e.status) for e in sink.events] == [
        (EventType.AUTHENTICATION_FAILURE, Decision.ERROR, 503)
    ]


def test_a_scrape_needs_the_scrape_token(tmp_path: Path) -> None:
    sink = ListSink()
    authenticator = _authenticator(
        TokenVerifier.create(AuthConfig(revocation=False), tmp_path, redis=None), sink
    )

    async def go() -> None:
        await authenticator.scraper(RequestContext(request_id="r1", endpoint="/metrics"), f"Bearer {SCRAPE}")
        with pytest.raises(UnauthenticatedError):
            await authenticator.scraper(RequestContext(request_id="r2", endpoint="/metrics"), "Bearer wrong")

    asyncio.run(go())
    assert [(e.request_id, e.endpoint, e.reason) for e in sink.events] == [
        ("r2", "/metrics", "metrics: missing or wrong scrape token")
    ]
