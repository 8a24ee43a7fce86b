"""The local engine's supervisor: a restarted engine counts as alive only once it serves."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from strongroom.config import Settings
from strongroom.supervisor import EngineSupervisor

pytestmark = pytest.mark.integration


def test_a_replacement_is_not_alive_until_it_answers_health(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Workers take the engine out of service while ``is_alive`` is False (gateway_workers'
    # down file, the pool's process probe). A replacement counted alive as soon as it was spawned
    # let a death pass unseen when the supervisor respawned it before anyone looked, and the
    # pool's probes then queued on the kept socket until the new process served.
    monkeypatch.setenv("STRONGROOM_DATA_DIR", str(tmp_path))
    supervisor = EngineSupervisor(Settings(data_dir=str(tmp_path)), None, stub=True)
    supervisor.start()
    headers = {"authorization": f"Bearer {supervisor.token}"}
    try:
        assert supervisor.is_alive(supervisor.url)
        first = supervisor._proc
        assert first is not None
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        assert not supervisor.is_alive(supervisor.url)
        deadline = time.monotonic() + 60
        served = False
        while not served:
            assert time.monotonic() < deadline, "the engine was not replaced"
            alive = supervisor.is_alive(supervisor.url)
            try:
                answer = httpx.get(f"{supervisor.url}/engine/v1/health", headers=headers, timeout=0.5)
                served = answer.status_code == 200
            except httpx.HTTPError:
                served = False
            # Alive (read before the probe) means serving: never a process that only started.
            assert served or not alive
            time.sleep(0.02)
        assert supervisor._proc is not first
        deadline = time.monotonic() + 5
        while not supervisor.is_alive(supervisor.url):
            assert time.monotonic() < deadline, "the served replacement stayed marked dead"
            time.sleep(0.05)
    finally:
        supervisor.stop()
