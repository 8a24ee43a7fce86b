"""The SQLite audit log on a small volume: a WAL sized to the free space, or one clear refusal.

Issue 17, finding 6: on a 20 MB data volume the 64 MiB WAL preallocation filled the disk and the
gateway could not start at all.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from audit.config import AuditConfig
from audit.errors import AuditUnavailableError
from audit.log import AuditLog
from tests.audit_doubles import sample_event

pytestmark = pytest.mark.integration


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    """A tmpfs of the given MiB (needs root; skipped elsewhere), unmounted afterwards."""
    mounts: list[Path] = []

    def mount(mib: int) -> Path:
        target = tmp_path / f"volume-{mib}"
        target.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={mib}m", "tmpfs", str(target)], check=False
        )
        if done.returncode != 0:
            pytest.skip("cannot mount a tmpfs here (needs root)")
        mounts.append(target)
        return target

    yield mount
    for target in mounts:
        subprocess.run(["umount", "-l", str(target)], check=False)


def test_a_small_volume_gets_a_smaller_wal_and_keeps_working(volume: Callable[[int], Path]) -> None:
    """Finding 6: on a 20 MB volume the 64 MiB preallocation filled the disk and nothing started."""
    data = volume(20)

    async def go() -> None:
        log = await AuditLog.open(AuditConfig(), data)
        wal = data / "audit" / "audit.db-wal"
        assert 0 < wal.stat().st_size <= 5 << 20  # at most a quarter of what was free
        for i in range(500):
            await log.append(sample_event(i))
        assert (await log.verify()).ok
        await log.close()

    asyncio.run(go())


def test_a_volume_too_small_refuses_the_start_with_one_message(volume: Callable[[int], Path]) -> None:
    data = volume(6)
    with pytest.raises(AuditUnavailableError, match=r"only \d MiB free under .*needs at least 8 MiB"):
        asyncio.run(AuditLog.open(AuditConfig(), data))
    served = subprocess.run(
        [sys.executable, "-m", "strongroom", "serve", "--stub-engine"],
        env={**os.environ, "STRONGROOM_DATA_DIR": str(data / "data"), "STRONGROOM_GRPC__ENABLED": "false"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert served.returncode == 1
    assert served.stderr.strip().splitlines() == [
        f"Error: only {served.stderr.split('only ')[1].split()[0]} MiB free under {data / 'data' / 'audit'}: "
        "the audit log needs at least 8 MiB to start"
    ]
