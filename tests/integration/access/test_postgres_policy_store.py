"""The policy in PostgreSQL: one policy for replicas on any host, sealed like the SQLite one.

Uses the shared server at 127.0.0.1:5432 with a unique schema per test.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator

import msgspec
import psycopg
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from audit.signer import CheckpointSigner
from common.audit_event import AuditEvent, EventType
from common.principal import Principal
from policies import (
    AccessConfig,
    Assignment,
    Authorizer,
    Grant,
    PolicyChange,
    PolicyTamperedError,
    PolicyUnavailableError,
)
from policies.policy_seal import PolicySeal
from policies.policy_watcher import PolicyWatcher

pytestmark = pytest.mark.integration
DSN = "host=127.0.0.1 port=5432 user=postgres dbname=test"
EVE = Principal(subject="eve", roles=(), issuer="https://idp")


class ListSink:
    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    async def append(self, event: AuditEvent) -> int:
        await asyncio.sleep(0.01)  # an audit append takes a while: the change's lock is held meanwhile
        self.events.append(event)
        return len(self.events)


@pytest.fixture
def config() -> Iterator[AccessConfig]:
    schema = f"policy_t_{uuid.uuid4().hex[:10]}"
    yield AccessConfig(backend="postgres", postgres_dsn=DSN, postgres_schema=schema)
    with psycopg.connect(DSN, autocommit=True) as admin:
        admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def seal() -> PolicySeal:
    return PolicySeal(CheckpointSigner(Ed25519PrivateKey.generate()))


def test_replicas_share_one_policy_and_each_change_is_audited_once(
    config: AccessConfig, seal: PolicySeal, tmp_path
) -> None:
    async def run() -> None:
        sinks = [ListSink(), ListSink()]
        # Two replicas starting at once seed the empty schema once.
        one, two = await asyncio.gather(
            *(
                asyncio.to_thread(Authorizer.open, config, tmp_path / f"r{i}", seal=seal, audit=sinks[i])
                for i in (0, 1)
            )
        )
        assert one.version == two.version == 1
        assert not two.allowed(EVE, "chat", "demo-chat")
        changes = [
            [PolicyChange(op="assign", rule=Assignment(member="user:eve", role="analyst"))],
            [PolicyChange(op="grant", rule=Grant(role="analyst", pattern="demo-base", action="chat"))],
        ]
        # Made at the same moment through both replicas: applied one after the other, none lost.
        await asyncio.gather(
            one.change(changes[0], "ops-1", sinks[0]), two.change(changes[1], "ops-2", sinks[1])
        )
        assert one.refresh() or two.refresh()
        for replica in (one, two):
            replica.refresh()
            assert replica.version == 3
            assert replica.allowed(EVE, "chat", "demo-chat") and replica.allowed(EVE, "chat", "demo-base")
        made = [[e.subject for e in sink.events if e.event_type == EventType.ADMIN_CHANGE] for sink in sinks]
        assert made == [["ops-1"], ["ops-2"]]
        await one.stop()
        await two.stop()

    asyncio.run(run())


def test_a_direct_edit_in_postgres_is_refused_and_audited(
    config: AccessConfig, seal: PolicySeal, tmp_path
) -> None:
    async def run() -> None:
        sink = ListSink()
        authz = Authorizer.open(config, tmp_path, seal=seal, audit=sink)
        with psycopg.connect(DSN, autocommit=True) as dba:  # someone with table rights, not the API
            dba.execute(f'SET search_path = "{config.postgres_schema}"')
            dba.execute("INSERT INTO policy_rule VALUES ('g', 'user:eve', 'admin', '*', '')")
            dba.execute("UPDATE policy_version SET version = 2")
        with pytest.raises(PolicyTamperedError):
            authz.refresh()
        await authz.stop()
        assert not authz.allowed(EVE, "admin:policy", "*") and authz.version == 1
        assert [e.reason for e in sink.events] == ["policy store tampered"]
        with pytest.raises(PolicyTamperedError):
            await authz.change(
                [PolicyChange(op="assign", rule=Assignment(member="user:x", role="analyst"))], "ops", sink
            )

    asyncio.run(run())


def test_a_hung_policy_store_does_not_stall_the_event_loop_and_fails_closed_after_the_lease(
    config: AccessConfig, seal: PolicySeal, tmp_path
) -> None:
    """A reload waiting on PostgreSQL (here: a table lock a DBA holds meanwhile) waits off the loop:
    the gateway keeps answering meanwhile. Once its lease (2 polls) runs out, it cannot know
    whether another gateway revoked something, so it refuses (503, saying why) rather than decide
    on the old version; when the store answers again, so does it."""

    def hold_lock(locked: threading.Event, release: threading.Event) -> None:
        with psycopg.connect(DSN) as dba, dba.transaction():
            dba.execute(f'LOCK TABLE "{config.postgres_schema}".policy_version IN ACCESS EXCLUSIVE MODE')
            locked.set()
            # Until the checks below are done (about 1 s), not a fixed time a loaded runner outlasts.
            release.wait(30)

    analyst = Principal(subject="a", roles=("analyst",), issuer="i")

    async def run() -> float:
        fast = msgspec.structs.replace(config, poll_interval_s=0.05, sync_timeout_s=0.2)
        authz = Authorizer.open(fast, tmp_path, seal=seal)
        await authz.start()
        locked, release = threading.Event(), threading.Event()
        holder = threading.Thread(target=hold_lock, args=(locked, release))
        holder.start()
        try:
            await asyncio.to_thread(locked.wait)
            loop, worst = asyncio.get_running_loop(), 0.0
            for _ in range(30):  # 0.75 s of ticks while every reload hangs on the lock
                start = loop.time()
                await asyncio.sleep(0.025)
                worst = max(worst, loop.time() - start - 0.025)
            with pytest.raises(PolicyUnavailableError, match=r"did not answer within 0\.2 s"):
                await authz.current()
            with pytest.raises(PolicyUnavailableError, match="could not be confirmed current"):
                authz.allowed(analyst, "chat", "demo-chat")
        finally:
            release.set()
            await asyncio.to_thread(holder.join)
        try:
            await authz.current()
            assert authz.allowed(analyst, "chat", "demo-chat")
        finally:
            await authz.stop()
        return worst

    assert asyncio.run(run()) < 0.2


def test_a_change_is_in_force_on_a_replica_of_another_host_when_its_call_returns(
    config: AccessConfig, seal: PolicySeal, tmp_path
) -> None:
    """Regression (#19): two gateways on one database, no shared data directory (no shared
    version board) and no Redis: the change's call returns only after the other replica's lease
    on the old version ran out, so its next decision is on the new one."""

    async def run() -> None:
        leased = msgspec.structs.replace(config, poll_interval_s=0.2)  # lease 0.4 s
        one = Authorizer.open(leased, tmp_path / "one", seal=seal)
        two = Authorizer.open(leased, tmp_path / "two", seal=seal)
        await two.start()
        try:
            await two.current()
            assert two.allowed(Principal(subject="x", roles=("analyst",), issuer="i"), "chat", "demo-chat")
            revoke = Grant(role="analyst", pattern="demo-chat", action="chat")
            await one.change([PolicyChange(op="ungrant", rule=revoke)], "ops", ListSink())
            await two.current()
            assert not two.allowed(
                Principal(subject="x", roles=("analyst",), issuer="i"), "chat", "demo-chat"
            )
        finally:
            await two.stop()
            one.store.close()

    asyncio.run(run())


def test_a_change_reaches_the_other_replica_by_notify_without_redis(
    config: AccessConfig, seal: PolicySeal, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No Redis and no polls: the NOTIFY sent in the change's transaction is what brings it."""

    async def never_poll(self: PolicyWatcher) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(PolicyWatcher, "_poll", never_poll)

    async def listening(channel: str) -> bool:
        """A session's last statement was the LISTEN on ``channel``: it is in place."""
        async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
            found = await conn.execute(
                "SELECT 1 FROM pg_stat_activity WHERE query = %s", (f'LISTEN "{channel}"',)
            )
            return await found.fetchone() is not None

    async def run() -> None:
        # No lease (the change would wait it out): this exercises the notification alone.
        no_lease = msgspec.structs.replace(config, lease_s=0)
        one = Authorizer.open(no_lease, tmp_path / "one", seal=seal)
        two = Authorizer.open(no_lease, tmp_path / "two", seal=seal)
        await two.start()
        try:
            # Waited for, not slept on: a NOTIFY sent before the LISTEN is lost.
            deadline = time.monotonic() + 10
            while not await listening(f"strongroom_policy_{config.postgres_schema}"):
                assert time.monotonic() < deadline, "no LISTEN within 10 s"
                await asyncio.sleep(0.01)
            await one.change(
                [PolicyChange(op="assign", rule=Assignment(member="user:eve", role="analyst"))],
                "ops",
                ListSink(),
            )
            deadline = time.monotonic() + 10
            while not two.allowed(EVE, "chat", "demo-chat"):
                assert time.monotonic() < deadline, "the change did not reach the other replica"
                await asyncio.sleep(0.01)
        finally:
            await two.stop()
            one.store.close()

    asyncio.run(run())
