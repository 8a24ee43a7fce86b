"""``strongroom token`` and ``strongroom admin revoke``: the auth layer's stores, from a shell.

Both read the settings through ``strongroom.config.load_settings`` and work on the same stores
as the server: the dev key under ``<data_dir>/keys`` and the revocation list in Redis (when
``redis_url`` is set) or in ``<data_dir>/auth/revocations.db``. A revocation is audited with the
operator's OS user and host once it is in force.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime

import click
import redis.asyncio

from audit.errors import AuditError
from audit.security_operation import record_operations
from common.audit_event import AuditEvent, Decision, EventType
from gateway.auth.dev_issuer import DevIssuer
from gateway.auth.errors import RevocationUnavailableError
from gateway.auth.revocation import RevocationList
from strongroom.config import Settings, load_settings

__all__ = ["revoke", "token"]

_config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    envvar="STRONGROOM_CONFIG",
    help="Settings file (TOML).",
)


class Timestamp(click.ParamType[float]):
    """A point in time: UNIX seconds, ISO 8601 with a zone (``2026-12-02T18:00:00Z``) or ``now``."""

    name = "time"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float):
            return value
        text = str(value).strip()
        if text == "now":
            return time.time()
        try:
            return float(text)
        except ValueError:
            pass
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            self.fail(f"{text!r} is not UNIX seconds, ISO 8601 or 'now'", param, ctx)
        if moment.tzinfo is None:
            self.fail(f"{text!r} needs a time zone (e.g. Z or +08:00)", param, ctx)
        return moment.timestamp()


@click.command("token")
@click.option("--sub", required=True, help="Subject (user id) of the token.")
@click.option("--role", "roles", multiple=True, help="Role to grant; repeat for several.")
@click.option("--tenant", default=None, help="Tenant / business unit claim.")
@click.option("--client-id", default=None, help="client_id claim (the calling application).")
@click.option(
    "--ttl", default=3600, show_default=True, type=click.IntRange(min=1), help="Lifetime in seconds."
)
@_config_option
def token(
    sub: str,
    roles: tuple[str, ...],
    tenant: str | None,
    client_id: str | None,
    ttl: int,
    config_path: str | None,
) -> None:
    """Print a JWT from the built-in dev issuer."""
    settings = load_settings(config_path)
    if not settings.auth.dev_issuer:
        raise click.UsageError("auth.dev_issuer is off: the gateway would not accept dev tokens")
    if ttl > settings.auth.max_lifetime_s:
        raise click.UsageError(f"--ttl exceeds auth.max_lifetime_s ({settings.auth.max_lifetime_s})")
    issuer = DevIssuer.load_or_create(settings.data_path)
    click.echo(issuer.mint(sub, roles, ttl_s=ttl, tenant=tenant, client_id=client_id))


@click.command("revoke")
@click.option("--jti", default=None, help="Revoke the token with this jti ...")
@click.option("--exp", type=Timestamp(), default=None, help="... until this time (the token's exp).")
@click.option("--sub", default=None, help="Revoke every token of this subject ...")
@click.option("--before", type=Timestamp(), default=None, help="... issued at or before this time.")
@_config_option
def revoke(
    jti: str | None, exp: float | None, sub: str | None, before: float | None, config_path: str | None
) -> None:
    """Revoke one token (--jti --exp) or all of a subject's tokens up to a time (--sub --before)."""
    is_by_token = jti is not None and exp is not None and sub is None and before is None
    is_by_subject = sub is not None and before is not None and jti is None and exp is None
    if not (is_by_token or is_by_subject):
        raise click.UsageError("give either --jti with --exp, or --sub with --before")
    settings = load_settings(config_path)
    try:
        asyncio.run(_revoke(settings, jti=jti, exp=exp, sub=sub, before=before))
    except RevocationUnavailableError as exc:
        raise click.ClickException(str(exc)) from None
    done = (
        f"revoked jti {jti} until {exp}"
        if jti is not None
        else f"revoked tokens of {sub} issued at or before {before}"
    )
    click.echo(done)
    # Recorded after the fact: a revocation protects, so an audit outage must not hold it back.
    event = AuditEvent(
        event_type=EventType.ADMIN_CHANGE, decision=Decision.ALLOW, endpoint="revocation", detail=done
    )
    try:
        asyncio.run(record_operations(settings.audit, settings.data_path, [event]))
    except AuditError as exc:
        raise click.ClickException(f"the revocation is in force but could not be audited: {exc}") from None


async def _revoke(
    settings: Settings, *, jti: str | None, exp: float | None, sub: str | None, before: float | None
) -> None:
    client = redis.asyncio.from_url(settings.redis_url) if settings.redis_url else None
    revocations = RevocationList.open(settings.auth, settings.data_path, redis=client)
    try:
        if jti is not None and exp is not None:
            await revocations.revoke_token(jti, expires_at=exp)
        elif sub is not None and before is not None:
            await revocations.revoke_subject(sub, before=before)
    finally:
        await revocations.aclose()
        if client is not None:
            await client.aclose()
