"""Two gateway replicas sharing the policy store and Redis: a change is in force on both when its
call returns (the version board), and the other replica loads it in the background within 1 s,
so requests rarely wait for a reload."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import redis.asyncio as aredis

from common.audit_event import AuditEvent
from common.principal import Principal
from policies import AccessConfig, Assignment, Authorizer, PolicyChange

pytestmark = pytest.mark.integration

EVE = Principal(subject="eve", roles=(), issuer="https://idp")


class ListSink:
    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    async def append(self, event: AuditEvent) -> int:
        self.events.append(event)
        return len(self.events)


async def _time_until_loaded(replica: Authorizer, version: int, limit_s: float = 2.0) -> float:
    start = time.monotonic()
    while replica.version < version:
        if time.monotonic() - start > limit_s:
            break
        await asyncio.sleep(0.01)
    return time.monotonic() - start


@pytest.mark.parametrize("second_has_redis", [True, False], ids=["pubsub", "missed-message-polling"])
def test_change_on_one_replica_reaches_the_other_within_a_second(
    tmp_path: Path, second_has_redis: bool
) -> None:
    async def run() -> None:
        client = aredis.Redis.from_url("redis://127.0.0.1:6379/0")
        try:
            await client.ping()
        except Exception as exc:
            pytest.fail(f"Redis must run on 127.0.0.1:6379: {exc}")
        cfg = AccessConfig(channel=f"test:policy:{tmp_path.name}")
        one = Authorizer.open(cfg, tmp_path, client)
        # Without Redis the second replica never hears the announcement: only polling saves it.
        two = Authorizer.open(cfg, tmp_path, client if second_has_redis else None)
        await one.start()
        await two.start()
        try:
            # Both listeners subscribed (an announcement before that is missed, and the poll is
            # 0.5 s): waited for, since a loaded runner can take longer than any fixed sleep.
            num_listeners = 2 if second_has_redis else 1
            deadline = time.monotonic() + 10
            while (await client.pubsub_numsub(cfg.channel))[0][1] < num_listeners:
                assert time.monotonic() < deadline, "the replicas did not subscribe within 10 s"
                await asyncio.sleep(0.01)
            assert not two.allowed(EVE, "chat", "demo-chat")
            change = PolicyChange(op="assign", rule=Assignment(member="user:eve", role="analyst"))
            await one.change([change], "root", ListSink())
            assert one.allowed(EVE, "chat", "demo-chat")
            elapsed = await _time_until_loaded(two, 2)  # no request asked: the watcher loaded it
            assert two.allowed(EVE, "chat", "demo-chat") and two.version == one.version == 2
            assert elapsed < 1.0
            if second_has_redis:
                assert elapsed < 0.4  # the announcement, not the 0.5 s poll
        finally:
            await one.stop()
            await two.stop()
            await client.aclose()

    asyncio.run(run())
