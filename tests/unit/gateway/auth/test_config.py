from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gateway.auth import AuthConfig, AuthConfigError, IssuerConfig

ISSUER = "https://idp.bank.test/realms/main"


def issuer(**overrides: Any) -> IssuerConfig:
    fields: dict[str, Any] = {"issuer": ISSUER, "audiences": ("strongroom",), "jwks_url": "https://idp/jwks"}
    fields.update(overrides)
    return IssuerConfig(**fields)


def test_defaults_are_asymmetric_and_fail_closed() -> None:
    config = issuer()
    assert config.algorithms == ("RS256", "PS256", "ES256", "EdDSA")
    assert not config.is_hmac
    auth = AuthConfig()
    assert auth.dev_issuer and auth.revocation and not auth.revocation_fail_open
    assert auth.leeway_s == 30 and auth.requires_jti


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"issuer": ""}, "issuer must not be empty"),
        ({"audiences": ()}, "audiences"),
        ({"audiences": ("",)}, "audiences"),
        ({"algorithms": ()}, "algorithms must not be empty"),
        ({"algorithms": ("none",)}, "unsupported algorithms"),
        ({"algorithms": ("RS256", "HS256")}, "algorithms need hmac_secret_env"),
        ({"algorithms": ("HS256",)}, "algorithms need hmac_secret_env"),
        ({"hmac_secret_env": "SECRET", "algorithms": ("HS256", "RS256")}, "only HS256"),
        ({"hmac_secret_env": "SECRET", "algorithms": ("HS256",)}, "takes no jwks_url"),
        ({"jwks_url": None}, "needs jwks_url or key_files"),
        ({"jwks_url": "http://idp.bank.test/jwks"}, "must be https"),
        ({"jwks_url": "file:///etc/jwks.json"}, "must be https"),
        ({"roles_claim": ""}, "roles_claim"),
        ({"role_mapping": {"group": ""}}, "role_mapping"),
        ({"tenant_claim": ""}, "tenant_claim"),
        ({"jwks_refetch_cooldown_s": 0}, "positive"),
        ({"jwks_max_stale_s": 10}, "jwks_max_stale_s must be >= jwks_cache_s"),
    ],
)
def test_issuer_config_rejects(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(AuthConfigError, match=message):
        issuer(**overrides)


def test_hmac_issuer_needs_only_the_env_name() -> None:
    config = issuer(jwks_url=None, algorithms=("HS256",), hmac_secret_env="IDP_SECRET")
    assert config.is_hmac


def test_http_jwks_allowed_only_on_loopback() -> None:
    assert issuer(jwks_url="http://127.0.0.1:8080/jwks").jwks_url


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"leeway_s": 31}, "allow_large_leeway"),
        ({"leeway_s": -1}, ">= 0"),
        ({"max_token_bytes": 10}, "max_token_bytes"),
        ({"max_lifetime_s": 0}, "max_lifetime_s"),
        ({"issuers": (issuer(), issuer())}, "only once"),
    ],
)
def test_auth_config_rejects(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(AuthConfigError, match=message):
        AuthConfig(**overrides)


def test_large_leeway_needs_explicit_opt_in() -> None:
    assert AuthConfig(leeway_s=120, allow_large_leeway=True).leeway_s == 120


def test_decodes_from_toml_shaped_data_and_validates() -> None:
    raw = {
        "issuers": [{"issuer": ISSUER, "audiences": ["strongroom"], "key_files": ["idp.pem"]}],
        "leeway_s": 10,
    }
    config = msgspec.convert(raw, AuthConfig)
    assert config.issuers[0].key_files == ("idp.pem",)
    raw["issuers"][0]["algorithms"] = ["HS256"]  # type: ignore[index]
    with pytest.raises(msgspec.ValidationError, match="hmac_secret_env"):
        msgspec.convert(raw, AuthConfig)


def test_misspelled_security_settings_are_errors() -> None:
    with pytest.raises(msgspec.ValidationError, match="revocation_fail_opn"):
        msgspec.convert({"revocation_fail_opn": True}, AuthConfig)
    with pytest.raises(msgspec.ValidationError, match="algorithm"):
        msgspec.convert(
            {"issuers": [{"issuer": ISSUER, "audiences": ["a"], "algorithm": ["HS256"]}]}, AuthConfig
        )
