"""``strongroom token`` and ``strongroom admin revoke`` against the same stores the server uses."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import jwt
import pytest
import redis.asyncio
from click.testing import CliRunner

from gateway.auth import AuthConfig, AuthenticationError, Principal, TokenVerifier
from gateway.auth.cli import revoke, token
from strongroom.config import load_settings


def write_config(tmp_path: Path, extra: str = "") -> str:
    path = tmp_path / "strongroom.toml"
    path.write_text(f'data_dir = "{tmp_path / "data"}"\n{extra}')
    return str(path)


def run(command: object, *args: str) -> str:
    result = CliRunner().invoke(command, list(args))  # type: ignore[arg-type]
    assert result.exit_code == 0, result.output
    return result.output.strip()


def verify(cfg: AuthConfig, data_dir: Path, minted: str, redis_url: str | None = None) -> Principal | str:
    """The principal, or the rejection reason; in its own event loop, as the CLI runs in its own."""

    async def check() -> Principal | str:
        client = redis.asyncio.from_url(redis_url) if redis_url else None
        verifier = TokenVerifier.create(cfg, data_dir, redis=client)
        try:
            return await verifier.verify(f"Bearer {minted}")
        except AuthenticationError as exc:
            return exc.reason
        finally:
            await verifier.aclose()
            if client is not None:
                await client.aclose()

    return asyncio.run(check())


def test_token_is_accepted_and_revoke_jti_takes_effect(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    minted = run(
        token,
        "--sub",
        "alice",
        "--role",
        "analyst",
        "--role",
        "admin",
        "--tenant",
        "retail",
        "--config",
        config,
    )
    principal = verify(AuthConfig(), tmp_path / "data", minted)
    assert isinstance(principal, Principal)
    assert principal.roles == ("analyst", "admin") and principal.tenant == "retail"
    run(revoke, "--jti", principal.token_id or "", "--exp", str(principal.expires_at), "--config", config)
    assert verify(AuthConfig(), tmp_path / "data", minted) == "token revoked (jti)"


def test_revoke_subject_through_redis(tmp_path: Path) -> None:
    prefix = f"test:auth:{uuid.uuid4().hex}:"
    url = "redis://127.0.0.1:6379/0"
    config = write_config(tmp_path, f'redis_url = "{url}"\n[auth]\nrevocation_key_prefix = "{prefix}"\n')
    settings = load_settings(config)
    minted = run(token, "--sub", "bob", "--config", config)
    principal = verify(settings.auth, settings.data_path, minted, url)
    assert isinstance(principal, Principal) and principal.subject == "bob"
    run(revoke, "--sub", "bob", "--before", "now", "--config", config)
    assert verify(settings.auth, settings.data_path, minted, url) == "subject revoked before this token's iat"
    assert isinstance(verify(AuthConfig(), settings.data_path, minted), Principal)  # SQLite never saw it

    async def cleanup() -> int:
        client = redis.asyncio.from_url(url)
        try:
            return int(await client.delete(f"{prefix}sub:bob"))
        finally:
            await client.aclose()

    assert asyncio.run(cleanup()) == 1


def test_token_options(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    minted = run(token, "--sub", "svc", "--ttl", "60", "--client-id", "batch", "--config", config)
    payload = jwt.decode(minted, options={"verify_signature": False})
    assert (
        payload["exp"] - payload["iat"] == 60 and payload["client_id"] == "batch" and payload["roles"] == []
    )
    too_long = CliRunner().invoke(token, ["--sub", "svc", "--ttl", "999999", "--config", config])
    assert too_long.exit_code != 0 and "max_lifetime_s" in too_long.output
    off = write_config(tmp_path, "[auth]\ndev_issuer = false\n")
    refused = CliRunner().invoke(token, ["--sub", "svc", "--config", off])
    assert refused.exit_code != 0 and "dev_issuer is off" in refused.output


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--jti", "x"],
        ["--sub", "bob"],
        ["--jti", "x", "--exp", "1900000000", "--sub", "bob"],
        ["--sub", "bob", "--before", "yesterday"],
        ["--sub", "bob", "--before", "2026-12-02T18:00:00"],
    ],
)
def test_revoke_rejects_bad_arguments(tmp_path: Path, args: list[str]) -> None:
    result = CliRunner().invoke(revoke, [*args, "--config", write_config(tmp_path)])
    assert result.exit_code == 2, result.output


def test_revoke_accepts_iso_times(tmp_path: Path) -> None:
    output = run(
        revoke, "--sub", "bob", "--before", "2026-12-02T18:00:00Z", "--config", write_config(tmp_path)
    )
    assert output == "revoked tokens of bob issued at or before 1796234400.0"
