"""Listener settings: TLS and limits validation, what counts as loopback, who may read /metrics."""

from __future__ import annotations

import pytest

from gateway.config import EngineTlsConfig, ServerConfig
from gateway.errors import ConfigError
from gateway.listener_config import ConnectionLimits, TlsConfig, is_loopback_host
from gateway.metrics_access import MetricsAccess
from gateway.telemetry_config import TelemetryConfig


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback_host(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "10.0.0.5", "gateway.internal", "localhost.evil.com"])
def test_exposed_hosts(host: str) -> None:
    assert not is_loopback_host(host)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"cert_file": "c.pem"}, "go together"),
        ({"cert_file": "c.pem", "key_file": "k.pem", "client_cert": "sometimes"}, "one of"),
        ({"cert_file": "c.pem", "key_file": "k.pem", "client_cert": "required"}, "client_ca_file"),
        ({"client_ca_file": "ca.pem", "client_cert": "required"}, "needs cert_file"),
        ({"cert_file": "c.pem", "key_file": "k.pem", "client_ca_file": "ca.pem"}, "say"),
    ],
)
def test_tls_settings_that_would_not_do_what_they_say_are_refused(kwargs: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        TlsConfig(**kwargs)  # type: ignore[arg-type]


def test_tls_modes() -> None:
    assert not TlsConfig().is_enabled
    required = TlsConfig(cert_file="c", key_file="k", client_ca_file="ca", client_cert="required")
    assert required.is_enabled and required.requires_client_cert
    assert not TlsConfig(
        cert_file="c", key_file="k", client_ca_file="ca", client_cert="optional"
    ).requires_client_cert
    with pytest.raises(ConfigError, match="go together"):
        EngineTlsConfig(key_file="k")


@pytest.mark.parametrize(
    "kwargs",
    [{"header_timeout_s": 0}, {"body_timeout_s": -1}, {"max_head_bytes": 10}, {"max_connections": 0}],
)
def test_limits_must_bound_something(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        ConnectionLimits(**kwargs)  # type: ignore[arg-type]


def test_plain_http_engine_urls_only_on_loopback() -> None:
    assert ServerConfig(engine_urls=("http://127.0.0.1:8100", "https://10.0.0.1:8100")).engine_urls
    for url in ("http://10.0.0.1:8100", "http://engine-0.engines:8100", "http://0.0.0.0:8100"):
        with pytest.raises(ConfigError, match="must be https"):
            ServerConfig(engine_urls=(url,))


SCRAPE = "s" * 24


def access(host: str, *, public: bool = False, token: str | None = SCRAPE) -> MetricsAccess:
    env = {"STRONGROOM_METRICS_TOKEN": token} if token is not None else {}
    return MetricsAccess(TelemetryConfig(metrics_public=public), ServerConfig(host=host), env)


def test_metrics_are_open_on_loopback_or_when_opened_and_need_the_scrape_token_elsewhere() -> None:
    assert access("127.0.0.1").allows(None)
    assert access("0.0.0.0", public=True).allows(None)
    exposed = access("0.0.0.0")
    assert not exposed.is_open
    assert exposed.allows(f"Bearer {SCRAPE}") and exposed.allows(f"bearer {SCRAPE}")
    for header in (None, "", "Bearer", f"Bearer {SCRAPE}x", f"Basic {SCRAPE}", "Bearer " + "s" * 23):
        assert not exposed.allows(header), header
    # No token configured: closed to everyone rather than open.
    assert not access("10.1.2.3", token=None).allows(f"Bearer {SCRAPE}")
    assert not access("10.1.2.3", token=None).allows(None)


def test_a_short_scrape_token_is_refused_at_start() -> None:
    with pytest.raises(ConfigError, match="at least 16"):
        access("0.0.0.0", token="short")
