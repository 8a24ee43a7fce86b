"""``strongroom admin``: change and inspect the access policy from a shell.

Operates on the same policy store as the gateway (``access.policy_db`` or PostgreSQL); every change
is audited with ``--actor`` as the actor and the OS user and host that ran the command (through
the running gateway, which owns the log, when there is one) and fails if that record cannot be
made durable. Running gateways pick the change up within ``access.poll_interval_s``, sooner when
Redis is configured (the new version is announced on ``access.channel``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import click

from audit.errors import AuditError
from common.principal import Principal
from policies.authorizer import Authorizer
from policies.errors import PolicyError
from policies.policy import ALL_DOMAINS, CONTROL_RESOURCE, Assignment, Grant, user_member
from policies.policy_change import PolicyChange
from strongroom.config import load_settings

__all__ = ["admin"]

config_option = click.option(
    "--config", "config_path", type=click.Path(dir_okay=False), default=None, envvar="STRONGROOM_CONFIG"
)
domain_option = click.option("--domain", default=ALL_DOMAINS, show_default=True, help="Tenant, or * for all.")
actor_option = click.option(
    "--actor", default=None, help="Who makes the change (default: OS user@host, always recorded as well)."
)


def _open(config_path: str | None) -> tuple[Any, Authorizer]:
    from audit.signer import CheckpointSigner
    from policies.policy_seal import PolicySeal

    settings = load_settings(config_path)
    seal = PolicySeal(CheckpointSigner.open(settings.audit, settings.data_path))
    try:
        authorizer = Authorizer.open(settings.access, settings.data_path, seal=seal)
    except PolicyError as exc:
        raise click.ClickException(exc.message) from None
    if authorizer.store.opening_note:  # this command created the store: the import is recorded
        from audit.security_operation import OperatorSink, local_identity

        try:
            sink = OperatorSink(settings.audit, settings.data_path)
            asyncio.run(authorizer.record_opening(sink, local_identity()))
        except AuditError as exc:
            raise click.ClickException(f"policy store created but its import not audited: {exc}") from None
    return settings, authorizer


def _change(config_path: str | None, changes: Sequence[PolicyChange], actor: str | None) -> None:
    from audit.security_operation import OperatorSink, local_identity

    settings, authorizer = _open(config_path)
    who = actor or local_identity()

    async def run() -> int:
        # Through the running gateway (the log's only writer) when there is one.
        policy = await authorizer.change(changes, who, OperatorSink(settings.audit, settings.data_path))
        if settings.redis_url:
            import redis.asyncio as aredis

            client = aredis.Redis.from_url(settings.redis_url)
            try:
                await client.publish(settings.access.channel, str(policy.version))
            except Exception as exc:  # replicas poll the version anyway
                click.echo(f"note: version not announced on Redis ({exc}); replicas will poll it", err=True)
            finally:
                await client.aclose()
        return policy.version

    try:
        version = asyncio.run(run())
    except PolicyError as exc:
        raise click.ClickException(exc.message) from None
    except AuditError as exc:
        raise click.ClickException(f"not changed, the change could not be audited: {exc}") from None
    for change in changes:
        click.echo(change.describe())
    click.echo(f"policy version {version}")


def _grants(role: str, pattern: str, actions: Sequence[str], domain: str) -> list[Grant]:
    try:
        return [Grant(role=role, pattern=pattern, action=a, domain=domain) for a in actions]
    except PolicyError as exc:
        raise click.BadParameter(exc.message) from None


def _member(user: str | None, member_role: str | None) -> str:
    if (user is None) == (member_role is None):
        raise click.UsageError("give exactly one of --user or --member-role")
    return user_member(user) if user is not None else str(member_role)


@click.group("admin")
def admin() -> None:
    """Grant models to roles, assign roles to users, and check what a caller may do."""


@admin.command("grant")
@click.argument("role")
@click.argument("pattern")
@click.option("--action", "actions", multiple=True, default=("chat",), show_default=True)
@domain_option
@actor_option
@config_option
def grant(
    role: str, pattern: str, actions: tuple[str, ...], domain: str, actor: str | None, config_path: str | None
) -> None:
    """Let ROLE use models matching PATTERN ('*' is the only wildcard; anchored)."""
    _change(
        config_path,
        [PolicyChange(op="grant", rule=g) for g in _grants(role, pattern, actions, domain)],
        actor,
    )


@admin.command("ungrant")
@click.argument("role")
@click.argument("pattern")
@click.option("--action", "actions", multiple=True, default=("chat",), show_default=True)
@domain_option
@actor_option
@config_option
def ungrant(
    role: str, pattern: str, actions: tuple[str, ...], domain: str, actor: str | None, config_path: str | None
) -> None:
    """Withdraw a grant made with ``grant``."""
    _change(
        config_path,
        [PolicyChange(op="ungrant", rule=g) for g in _grants(role, pattern, actions, domain)],
        actor,
    )


def _assignment(role: str, user: str | None, member_role: str | None, domain: str) -> Assignment:
    try:
        return Assignment(member=_member(user, member_role), role=role, domain=domain)
    except PolicyError as exc:
        raise click.BadParameter(exc.message) from None


@admin.command("assign")
@click.argument("role")
@click.option("--user", default=None, help="Token subject (sub) that gets ROLE.")
@click.option("--member-role", default=None, help="Role that inherits ROLE.")
@domain_option
@actor_option
@config_option
def assign(
    role: str,
    user: str | None,
    member_role: str | None,
    domain: str,
    actor: str | None,
    config_path: str | None,
) -> None:
    """Give ROLE to a user (whose roles do not come from the IdP) or to another role."""
    _change(
        config_path, [PolicyChange(op="assign", rule=_assignment(role, user, member_role, domain))], actor
    )


@admin.command("unassign")
@click.argument("role")
@click.option("--user", default=None)
@click.option("--member-role", default=None)
@domain_option
@actor_option
@config_option
def unassign(
    role: str,
    user: str | None,
    member_role: str | None,
    domain: str,
    actor: str | None,
    config_path: str | None,
) -> None:
    """Take ROLE away again."""
    _change(
        config_path, [PolicyChange(op="unassign", rule=_assignment(role, user, member_role, domain))], actor
    )


json_option = click.option("--json", "as_json", is_flag=True, help="One JSON document on one line.")


@admin.command("show")
@click.option("--user", default=None, help="Show this user's effective roles and grants.")
@click.option("--role", default=None, help="Show this role's effective roles and grants.")
@click.option("--tenant", default=None)
@config_option
@json_option
def show(
    user: str | None, role: str | None, tenant: str | None, config_path: str | None, as_json: bool
) -> None:
    """Print the policy (CSV with its version), or one user's or role's effective permissions."""
    _, authorizer = _open(config_path)
    if user is None and role is None:
        if as_json:  # the admin API's form: version, grants, assignments
            click.echo(json.dumps(authorizer.policy.to_dict()))
            return
        click.echo(f"# policy version {authorizer.version}")
        click.echo(authorizer.policy.to_csv(), nl=False)
        return
    member = _member(user, role)
    domain = tenant or ALL_DOMAINS
    out = {
        "member": member,
        "domain": domain,
        "roles": authorizer.effective_roles([member], domain),
        "grants": [", ".join(g.as_line()) for g in authorizer.effective_grants([member], domain)],
    }
    click.echo(json.dumps(out) if as_json else json.dumps(out, indent=2))


@admin.command("check")
@click.argument("action")
@click.argument("model", default=CONTROL_RESOURCE)
@click.option("--user", default=None, help="Token subject of the caller.")
@click.option("--role", "roles", multiple=True, help="A role in the caller's token (repeatable).")
@click.option("--tenant", default=None)
@config_option
@json_option
def check(
    action: str,
    model: str,
    user: str | None,
    roles: tuple[str, ...],
    tenant: str | None,
    config_path: str | None,
    as_json: bool,
) -> None:
    """Dry run: may this caller perform ACTION on MODEL? Exit status 0 allowed, 1 denied."""
    if user is None and not roles:
        raise click.UsageError("give --user, --role or both")
    _, authorizer = _open(config_path)
    caller = Principal(subject=user if user is not None else "\0", roles=roles, issuer="cli", tenant=tenant)
    allowed = authorizer.allowed(caller, action, model)
    if as_json:
        row = {"allowed": allowed, "action": action, "model": model, "policy_version": authorizer.version}
        click.echo(json.dumps(row))
        raise SystemExit(0 if allowed else 1)
    click.echo(
        f"{'allowed' if allowed else 'denied'}: {action} on {model} (policy version {authorizer.version})"
    )
    raise SystemExit(0 if allowed else 1)
