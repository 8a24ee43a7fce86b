"""Fail closed under a real outage: no append succeeds without its durable record, none is lost."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from audit.config import AuditConfig
from audit.log import AuditLog

pytestmark = pytest.mark.integration


def test_sqlite_made_read_only_under_load(drill, tmp_path: Path) -> None:
    db = tmp_path / "audit" / "audit.db"
    files = [str(db), f"{db}-wal"]

    async def go() -> None:
        log = await AuditLog.open(AuditConfig(), tmp_path)
        try:
            ok, failed = await drill.run_outage(
                log,
                lambda: subprocess.run(["chattr", "+i", *files], check=True),
                lambda: subprocess.run(["chattr", "-i", *files], check=True),
            )
            await drill.check_nothing_lost(log, log.store, ok, failed)
        finally:
            subprocess.run(["chattr", "-i", *files], check=False)
            await log.close()

    asyncio.run(go())
