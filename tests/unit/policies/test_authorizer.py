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
from policies.errors import PolicyConflictError, PolicyUnavailableError


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
    # The version board says version 2 exists: version 1 decides nothing more, it answers 503.
    with pytest.raises(PolicyUnavailableError, match="version 2 is committed"):
        two.allowed(caller(sub="eve"), "chat", "demo-chat")
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


REVOKE_ANALYST_CHAT = PolicyChange(
    op="ungrant", rule=Grant(role="analyst", pattern="demo-chat", action="chat")
)
GRANT_TRADER_CHAT = PolicyChange(op="grant", rule=Grant(role="trader", pattern="demo-chat", action="chat"))


def test_a_change_is_in_force_on_every_replica_of_the_host_when_its_call_returns(
    tmp_path: Path, sink: Any
) -> None:
    """Regression (#19): a replica used to decide on its old version until its next poll (0.5 s)
    or the Redis announcement. No watcher runs here, nothing is announced, nothing sleeps."""
    one, two = Authorizer.open(AccessConfig(), tmp_path), Authorizer.open(AccessConfig(), tmp_path)

    async def run() -> None:
        assert two.allowed(caller("analyst"), "chat", "demo-chat")
        await one.change([REVOKE_ANALYST_CHAT], "root", sink)
        await two.current()
        assert not two.allowed(caller("analyst"), "chat", "demo-chat")
        await one.change([GRANT_TRADER_CHAT], "root", sink)
        await two.current()
        assert two.allowed(caller("trader"), "chat", "demo-chat") and two.version == 3

    asyncio.run(run())


def test_a_replica_that_cannot_load_the_committed_version_refuses_rather_than_decide(
    tmp_path: Path, sink: Any
) -> None:
    one, two = Authorizer.open(AccessConfig(), tmp_path), Authorizer.open(AccessConfig(), tmp_path)
    asyncio.run(one.change([REVOKE_ANALYST_CHAT], "root", sink))
    db = tmp_path / "policies" / "policy.db"
    for leftover in (db.with_name("policy.db-wal"), db.with_name("policy.db-shm")):
        leftover.unlink(missing_ok=True)
    db.write_bytes(b"not a database" * 100)  # the disk under the store failed
    with pytest.raises(PolicyUnavailableError, match="version 2 is committed; this replica holds 1"):
        asyncio.run(two.current())
    with pytest.raises(PolicyUnavailableError):
        two.allowed(caller("analyst"), "chat", "demo-chat")  # never the revoked grant's answer


def test_with_redis_down_a_change_is_still_in_force_everywhere_at_once(tmp_path: Path, sink: Any) -> None:
    async def run() -> None:
        from redis.asyncio import Redis

        dead = Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)  # nothing listens there
        one = Authorizer.open(AccessConfig(), tmp_path, dead)
        two = Authorizer.open(AccessConfig(), tmp_path, dead)
        await one.start()
        await two.start()
        try:
            await one.change([REVOKE_ANALYST_CHAT], "root", sink)  # the announcement fails: logged
            await two.current()
            assert not two.allowed(caller("analyst"), "chat", "demo-chat")
        finally:
            await one.stop()
            await two.stop()
            await dead.aclose()

    asyncio.run(run())


def test_a_store_restored_to_an_older_version_resets_the_board_on_open(tmp_path: Path, sink: Any) -> None:
    one = Authorizer.open(AccessConfig(), tmp_path)
    db = tmp_path / "policies" / "policy.db"
    backup = db.read_bytes()
    asyncio.run(one.change([REVOKE_ANALYST_CHAT], "root", sink))
    db.write_bytes(backup)  # restored from the backup taken at version 1
    again = Authorizer.open(AccessConfig(), tmp_path)
    assert again.version == 1 and again.allowed(caller("analyst"), "chat", "demo-chat")
