"""The policy store is tamper-evident: a direct edit of policy.db is detected, refused and audited.

Regression for issue 17: editing policy.db (a grant inserted, the version bumped) turned a 403
into a 200 on a running gateway within 1.5 s, and left no record.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from audit.signer import CheckpointSigner
from common.audit_event import EventType
from common.principal import Principal
from policies import AccessConfig, Authorizer, Grant, PolicyChange, PolicyTamperedError
from policies.policy_seal import PolicySeal

from .conftest import ListSink

ANALYST = Principal(subject="ann", roles=("analyst",), issuer="https://idp")
GRANT = ("p", "analyst", "*", "demo-base", "chat")


@pytest.fixture
def seal() -> PolicySeal:
    return PolicySeal(CheckpointSigner(Ed25519PrivateKey.generate()))


def _open(tmp_path: Path, seal: PolicySeal, sink: ListSink) -> Authorizer:
    return Authorizer.open(AccessConfig(), tmp_path, seal=seal, audit=sink)


def _edit(tmp_path: Path, *statements: str) -> None:
    """What an attacker with write access to the file does: plain SQL, no API."""
    conn = sqlite3.connect(tmp_path / "policies" / "policy.db", isolation_level=None)
    try:
        for statement in statements:
            conn.execute(statement)
    finally:
        conn.close()


_INSERT_GRANT = f"INSERT INTO policy_rule VALUES {GRANT!r}"
_BUMP = "UPDATE policy_version SET version = version + 1"


def _tamper_records(sink: ListSink) -> list[str]:
    return [e.detail for e in sink.events if e.event_type == EventType.ADMIN_CHANGE and e.decision == "deny"]


def test_a_direct_edit_is_not_taken_into_use_and_is_audited_once(
    tmp_path: Path, seal: PolicySeal, sink: ListSink
) -> None:
    async def run() -> None:
        authz = _open(tmp_path, seal, sink)
        assert not authz.allowed(ANALYST, "chat", "demo-base")
        _edit(tmp_path, _INSERT_GRANT, _BUMP)
        for _ in range(3):  # three watcher polls
            with pytest.raises(PolicyTamperedError):
                authz.refresh()
        await authz.stop()  # waits for the audit append
        assert not authz.allowed(ANALYST, "chat", "demo-base")  # still the last verified policy
        assert authz.version == 1
        (detail,) = _tamper_records(sink)
        assert "version 2" in detail and "version 1 stays in force" in detail

    asyncio.run(run())


def test_a_change_through_the_api_refuses_to_build_on_an_edit(
    tmp_path: Path, seal: PolicySeal, sink: ListSink
) -> None:
    """An edit that leaves the version alone must not be laundered into the next sealed version."""

    async def run() -> None:
        authz = _open(tmp_path, seal, sink)
        _edit(tmp_path, _INSERT_GRANT)
        change = PolicyChange(
            op="grant", rule=Grant(role="analyst", pattern="demo-base", action="completion")
        )
        with pytest.raises(PolicyTamperedError):
            await authz.change([change], "ops", sink)
        assert ["policy change refused" in d for d in _tamper_records(sink)] == [True]
        assert not [e for e in sink.events if e.decision == "allow"]  # no change was recorded as made
        with pytest.raises(PolicyTamperedError):
            _open(tmp_path, seal, sink)  # and nobody starts on it

    asyncio.run(run())


def test_a_store_put_back_to_an_older_sealed_state_is_refused(
    tmp_path: Path, seal: PolicySeal, sink: ListSink
) -> None:
    async def run() -> None:
        authz = _open(tmp_path, seal, sink)
        db = tmp_path / "policies" / "policy.db"
        shutil.copy(db, tmp_path / "old.db")
        change = PolicyChange(op="grant", rule=Grant(role="analyst", pattern="demo-base", action="chat"))
        await authz.change([change], "ops", sink)
        shutil.copy(tmp_path / "old.db", db)  # a valid seal, but of version 1
        (db.parent / "policy.db-wal").unlink(missing_ok=True)
        with pytest.raises(PolicyTamperedError, match="went back from version 2 to 1"):
            authz.refresh()
        await authz.stop()
        assert authz.allowed(ANALYST, "chat", "demo-base") and authz.version == 2
        assert len(_tamper_records(sink)) == 1

    asyncio.run(run())


def test_changes_through_the_api_keep_the_seal_and_other_replicas_follow(
    tmp_path: Path, seal: PolicySeal, sink: ListSink
) -> None:
    async def run() -> None:
        one, two = _open(tmp_path, seal, sink), _open(tmp_path, seal, sink)
        change = PolicyChange(op="grant", rule=Grant(role="analyst", pattern="demo-base", action="chat"))
        await one.change([change], "ops", sink)
        assert two.refresh() and two.allowed(ANALYST, "chat", "demo-base")
        other_key = PolicySeal(CheckpointSigner(Ed25519PrivateKey.generate()))
        with pytest.raises(PolicyTamperedError):  # a seal made with any other key is no seal
            _open(tmp_path, other_key, sink)

    asyncio.run(run())


def test_a_store_from_before_seals_is_sealed_once_and_that_is_audited(
    tmp_path: Path, seal: PolicySeal, sink: ListSink
) -> None:
    async def run() -> None:
        Authorizer.open(AccessConfig(), tmp_path)  # no seal: as the previous release left it
        _edit(
            tmp_path,
            "CREATE TABLE old_version AS SELECT id, version FROM policy_version",
            "DROP TABLE policy_version",
            "ALTER TABLE old_version RENAME TO policy_version",
        )
        authz = _open(tmp_path, seal, sink)
        await authz.start()
        await authz.stop()
        assert ["had no seal; sealed as found" in e.detail for e in sink.events] == [True]
        _open(tmp_path, seal, sink)  # verifies now

    asyncio.run(run())
