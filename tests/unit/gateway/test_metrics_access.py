"""/metrics on a gateway bound off loopback: the scrape token or 401, and each refusal audited."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from litestar import Litestar, Request, Response
from litestar.di import Provide
from litestar.testing import AsyncTestClient

from common.audit_event import AuditEvent, EventType
from gateway.app import metrics_endpoint
from gateway.auditor import Auditor
from gateway.auth import AuthConfig, TokenVerifier
from gateway.authenticator import Authenticator
from gateway.config import ServerConfig
from gateway.errors import response_parts
from gateway.metrics_access import MetricsAccess
from gateway.services import Services
from gateway.telemetry import Telemetry
from gateway.telemetry_config import TelemetryConfig

SCRAPE = "scrape-token-of-a-decent-length"


class ListSink:
    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    async def append(self, event: AuditEvent) -> int:
        self.events.append(event)
        return len(self.events)


@pytest.mark.filterwarnings("ignore:.*Inferred dependency field")  # the app's handlers, as served
def test_off_loopback_metrics_need_the_scrape_token(tmp_path: Any) -> None:
    sink = ListSink()
    access = MetricsAccess(
        TelemetryConfig(), ServerConfig(host="0.0.0.0"), {"STRONGROOM_METRICS_TOKEN": SCRAPE}
    )
    services = Services.__new__(Services)  # only what /metrics touches
    services.telemetry = Telemetry.install(TelemetryConfig())
    verifier = TokenVerifier.create(AuthConfig(revocation=False), tmp_path, redis=None)
    services.authenticator = Authenticator(verifier, access, Auditor(sink))

    def on_error(_: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
        status, body, headers = response_parts(exc)
        return Response(body, status_code=status, headers=headers, media_type="application/json")

    app = Litestar(
        route_handlers=[metrics_endpoint],
        dependencies={"services": Provide(lambda: services, sync_to_thread=False)},
        exception_handlers={Exception: on_error},
    )

    async def go() -> None:
        async with AsyncTestClient(app) as client:
            for headers in ({}, {"authorization": "Bearer wrong-token-of-some-length"}):
                refused = await client.get("/metrics", headers=headers)
                assert refused.status_code == 401 and refused.json()["error"]["message"] == "Invalid token"
                assert "strongroom" not in refused.text
            served = await client.get("/metrics", headers={"authorization": f"Bearer {SCRAPE}"})
            assert served.status_code == 200 and served.headers["content-type"].startswith("text/plain")

    asyncio.run(go())
    assert [(e.event_type, e.status, e.endpoint) for e in sink.events] == [
        (EventType.AUTHENTICATION_FAILURE, 401, "/metrics")
    ] * 2
