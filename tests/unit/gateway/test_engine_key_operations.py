"""An engine's key operations reach the gateway's audit log as the very records ``keys`` makes.

The engine process has no audit log: ``KeyOperationLog`` keeps the KEY_OPERATION events of
opening its models as the engine protocol's own ``KeyOperationEvent``; ``EngineInfo`` carries
them; the engine pool turns each back into an ``AuditEvent`` and appends it once. Here a real
engine server runs in a child process on loopback and the pool records into a memory sink.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import msgspec
import pytest

from common.audit_event import AuditEvent, Decision, EventType
from engine.serving.client import EngineClient
from engine.serving.protocol import KeyOperationEvent
from gateway.engine_pool import EnginePool
from keys.key_audit import key_event
from keys.provider import KeyRef
from strongroom.engine_process import KeyOperationLog
from tests.audit_doubles import MemorySink

pytestmark = pytest.mark.anyio
TOKEN = "key-operations-test-token"
_ENGINE = """
import asyncio, socket, sys, msgspec, uvicorn
from common.audit_event import AuditEvent, Decision, EventType
from engine.serving.server import EngineServer
from engine.serving.stub_engine import StubEngine
from strongroom.engine_process import KeyOperationLog
operations = []
for event in msgspec.json.decode(sys.argv[3], type=list[AuditEvent]):
    asyncio.run(KeyOperationLog(operations).append(event))
sock = socket.socket(fileno=int(sys.argv[1]))
app = EngineServer(StubEngine(), sys.argv[2], key_operations=operations).app()
uvicorn.Server(uvicorn.Config(app, log_level="error", lifespan="on")).run(sockets=[sock])
"""
KEY = KeyRef(key_id="master", version=3)
EVENTS = [
    key_event("unwrap", KEY, model="demo-chat", process="engine pid 4711", provider="file"),
    key_event(
        "unwrap", KEY, model="demo-base", process="engine pid 4711", provider="pkcs11", error="wrong key"
    ),
    key_event("unwrap", KEY, model="demo-base", process="", provider="file"),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def engine_url() -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    fd = sock.fileno()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    events = msgspec.json.encode(EVENTS).decode()
    proc = subprocess.Popen([sys.executable, "-c", _ENGINE, str(fd), TOKEN, events], pass_fds=(fd,), env=env)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        proc.kill()
        proc.wait(10)
        sock.close()


async def test_the_pool_records_each_engine_key_operation_once_as_keys_wrote_it(engine_url: str) -> None:
    sink = MemorySink()
    client = EngineClient(engine_url, TOKEN, read_timeout_s=30.0)
    pool = EnginePool([client], refresh_s=60.0, audit=sink)
    # The child process needs a moment to import and answer: 20 s was too short on a loaded
    # 2-core runner now and then; the loop ends as soon as it answers.
    deadline = time.monotonic() + 90.0
    while not sink.events and time.monotonic() < deadline:
        await pool.refresh()
        await asyncio.sleep(0.05)
    instance_id = (await client.info()).instance_id
    expected: list[AuditEvent] = [
        *EVENTS[:2],
        msgspec.structs.replace(EVENTS[2], engine_instance=instance_id),
    ]
    assert sink.events == expected
    assert [e.decision for e in sink.events] == ["allow", "error", "allow"]

    await pool.refresh()  # a second refresh sees the same operations and records none again
    assert sink.events == expected
    await client.aclose()


async def test_the_engine_process_refuses_to_keep_an_event_that_is_no_key_operation() -> None:
    operations: list[KeyOperationEvent] = []
    other = AuditEvent(event_type=EventType.ADMIN_CHANGE, decision=Decision.ALLOW, detail="{}")
    with pytest.raises(ValueError, match="admin_change event describes no key operation"):
        await KeyOperationLog(operations).append(other)
    assert operations == []
