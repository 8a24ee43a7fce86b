from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from audit.errors import AuditUnavailableError
from common.audit_event import EventType
from common.principal import Principal
from policies import AccessConfig, Assignment, Authorizer, Grant, PolicyChange
from policies.errors import PolicyConflictError


def caller(*roles: str, sub: str = "someone", tenant: str | None = None) -> Principal:
    return Principal(subject=sub, roles=roles, issuer="https://idp", tenant=tenant)


def test_default_policy(authorizer: Authorizer) -> None:
    analyst, admin = caller("analyst"), caller("admin")
    assert authorizer.allowed(analyst, "chat", "demo-chat")
    assert authorizer.allowed(analyst, "completion", "demo-chat")
    assert not authorizer.allowed(analyst, "chat", "demo-base")
    assert not authorizer.allowed(analyst, "embedding", "demo-chat")
    assert not authorizer.allowed(analyst, "admin:policy", "*")
    assert authorizer.allowed_models(admin, "chat", ["demo-chat", "demo-base", "org/x"]) == [
        "demo-chat",
        "demo-base",
        "org/x",
    ]
    assert all(authorizer.allowed(admin, a, "*") for a in ("admin:policy", "admin:keys", "audit:read"))
    assert not authorizer.allowed(admin, "audit:content", "*")  # separation of duties
    assert authorizer.allowed(caller("auditor"), "audit:read", "*")
    assert not authorizer.allowed(caller("auditor"), "audit:content", "*")
    assert authorizer.allowed(caller("compliance"), "audit:content", "*")
    assert not authorizer.allowed(caller(), "chat", "demo-chat")  # deny by default
    assert not authorizer.allowed(caller("nobody"), "chat", "demo-chat")


def test_subject_cannot_become_a_role_or_another_user(authorizer: Authorizer, sink: Any) -> None:
    # A token whose sub is "admin" is the user admin, not the admin role.
    assert not authorizer.allowed(caller(sub="admin"), "admin:policy", "*")
    asyncio.run(
        authorizer.change(
            [PolicyChange(op="assign", rule=Assignment(member="user:alice", role="admin"))], "root", sink
        )
    )
    assert authorizer.allowed(caller(sub="alice"), "admin:policy", "*")
    # ... and a token role spelling a user is ignored.
    assert not authorizer.allowed(caller("user:alice"), "admin:policy", "*")


def test_domains(tmp_path: Path, sink: Any) -> None:
    seed = tmp_path / "seed.csv"
    seed.write_text("p, ops, acme, org/*, chat\np, ops, *, shared, chat\ng, user:bob, ops, acme\n")
    authz = Authorizer.open(AccessConfig(seed_policy=str(seed)), tmp_path)
    assert authz.allowed(caller(sub="bob", tenant="acme"), "chat", "org/m")
    assert authz.allowed(caller(sub="bob", tenant="acme"), "chat", "shared")
    assert not authz.allowed(caller(sub="bob", tenant="other"), "chat", "shared")  # role held in acme only
    assert not authz.allowed(caller(sub="bob"), "chat", "shared")
    assert authz.allowed(caller("ops", tenant="other"), "chat", "shared")
    assert not authz.allowed(caller("ops", tenant="other"), "chat", "org/m")


def test_change_is_audited_and_versioned(authorizer: Authorizer, sink: Any) -> None:
    grant = Grant(role="analyst", pattern="demo-base", action="chat")
    policy = asyncio.run(authorizer.change([PolicyChange(op="grant", rule=grant)], "root", sink))
    assert policy.version == 2 and authorizer.version == 2
    assert authorizer.allowed(caller("analyst"), "chat", "demo-base")
    (event,) = sink.events
    assert event.event_type is EventType.ADMIN_CHANGE and event.subject == "root"
    assert json.loads(event.before) == {"rules": [], "version": 1}
    assert json.loads(event.after) == {"rules": ["p, analyst, *, demo-base, chat"], "version": 2}
    asyncio.run(authorizer.change([PolicyChange(op="ungrant", rule=grant)], "root", sink))
    assert not authorizer.allowed(caller("analyst"), "chat", "demo-base") and authorizer.version == 3


def test_audit_failure_means_no_change(authorizer: Authorizer, sink: Any) -> None:
    sink.failing = True
    change = PolicyChange(op="grant", rule=Grant(role="analyst", pattern="demo-base", action="chat"))
    with pytest.raises(AuditUnavailableError):
        asyncio.run(authorizer.change([change], "root", sink))
    assert authorizer.store.version() == 1 and authorizer.store.load() == authorizer.policy
    assert not authorizer.allowed(caller("analyst"), "chat", "demo-base")


def test_batch_is_atomic(authorizer: Authorizer, sink: Any) -> None:
    ok = PolicyChange(op="grant", rule=Grant(role="analyst", pattern="x", action="chat"))
    dup = PolicyChange(op="grant", rule=Grant(role="analyst", pattern="demo-chat", action="chat"))
    with pytest.raises(PolicyConflictError):
        asyncio.run(authorizer.change([ok, dup], "root", sink))
    assert authorizer.store.version() == 1 and not sink.events
    assert Grant(role="analyst", pattern="x", action="chat") not in authorizer.store.load().grants


def test_other_replica_catches_up_by_version(tmp_path: Path, sink: Any) -> None:
    one, two = Authorizer.open(AccessConfig(), tmp_path), Authorizer.open(AccessConfig(), tmp_path)
    asyncio.run(
        one.change(
            [PolicyChange(op="assign", rule=Assignment(member="user:eve", role="analyst"))], "root", sink
        )
    )
    assert not two.allowed(caller(sub="eve"), "chat", "demo-chat")
    assert two.refresh() is True and two.version == 2
    assert two.allowed(caller(sub="eve"), "chat", "demo-chat")
    assert two.refresh() is False


def test_seed_only_once(tmp_path: Path, sink: Any) -> None:
    first = Authorizer.open(AccessConfig(), tmp_path)
    asyncio.run(
        first.change(
            [PolicyChange(op="ungrant", rule=Grant(role="analyst", pattern="demo-chat", action="chat"))],
            "r",
            sink,
        )
    )
    again = Authorizer.open(AccessConfig(), tmp_path)
    assert again.version == 2 and not again.allowed(caller("analyst"), "chat", "demo-chat")
    assert (tmp_path / "policies" / "policy.db").exists()


def test_concurrent_changes_in_one_process_serialise(authorizer: Authorizer, sink: Any) -> None:
    async def run() -> list[int]:
        changes = [
            PolicyChange(op="grant", rule=Grant(role="analyst", pattern=f"m{i}", action="chat"))
            for i in range(5)
        ]
        done = await asyncio.gather(*(authorizer.change([c], "root", sink) for c in changes))
        return sorted(p.version for p in done)

    assert asyncio.run(run()) == [2, 3, 4, 5, 6]
    assert authorizer.version == 6 and len(sink.events) == 5
