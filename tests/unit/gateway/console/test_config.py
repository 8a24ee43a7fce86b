from __future__ import annotations

import pytest

from gateway.console.config import ConsoleConfig
from gateway.errors import ConfigError

IDP = {
    "oidc_issuer": "https://idp.bank.example/realms/staff",
    "oidc_client_id": "strongroom-console",
    "oidc_redirect_url": "https://llm.bank.example/console/callback",
}


def test_defaults_and_a_complete_idp_are_accepted() -> None:
    assert not ConsoleConfig().has_oidc
    assert ConsoleConfig(**IDP).has_oidc  # type: ignore[arg-type]
    ConsoleConfig(**{**IDP, "oidc_issuer": "http://127.0.0.1:8080"})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "change",
    [
        {"oidc_client_id": ""},
        {"oidc_redirect_url": ""},
        {"oidc_issuer": "http://idp.bank.example"},  # plain http off loopback
        {"oidc_redirect_url": "http://llm.bank.example/console/callback"},
        {"oidc_redirect_url": "https://llm.bank.example/elsewhere"},
        {"session_idle_s": 0},
        {"session_idle_s": 9000, "session_absolute_s": 600},
        {"max_sessions": 0},
    ],
)
def test_unsafe_or_incomplete_settings_are_refused(change: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        ConsoleConfig(**{**IDP, **change})  # type: ignore[arg-type]
