from __future__ import annotations

from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from audit.config import AuditConfig
from audit.log import AuditLog
from tests.audit_doubles import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def open_log(tmp_path: Path, clock: FakeClock) -> Callable[..., Coroutine[Any, Any, AuditLog]]:
    async def opener(cfg: AuditConfig | None = None, **kwargs: Any) -> AuditLog:
        return await AuditLog.open(cfg or AuditConfig(), tmp_path, clock=clock, **kwargs)

    return opener
