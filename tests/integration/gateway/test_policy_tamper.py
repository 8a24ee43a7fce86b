"""Regression (issue 17): editing policy.db beside a running gateway turned a refusal into a 200
within 1.5 s and left no audit record. Now the edit fails the store's seal: the gateway keeps
its last verified policy, records the finding once, and a restart refuses to start on it."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import wait_for

pytestmark = pytest.mark.integration

BODY = {"model": "demo-base", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}


def test_a_direct_edit_of_policy_db_is_refused_and_recorded(tmp_path: Path, serve: Any) -> None:
    with serve(tmp_path) as gw:
        analyst = {"authorization": f"Bearer {gw.token('ann', 'analyst')}"}
        assert (
            httpx.post(f"{gw.v1}/chat/completions", json=BODY, headers=analyst, timeout=60).status_code == 404
        )
        db = sqlite3.connect(gw.data_dir / "policies" / "policy.db", isolation_level=None)
        db.execute("INSERT INTO policy_rule VALUES ('p', 'analyst', '*', 'demo-base', 'chat')")
        db.execute("UPDATE policy_version SET version = version + 1")
        db.close()

        def tampered() -> list[dict[str, Any]]:
            return [r for r in gw.audit_records() if r["event"].get("reason") == "policy store tampered"]  # type: ignore[union-attr]

        wait_for(tampered, what="the watcher's tamper record")
        time.sleep(1.5)  # three more polls of the watcher: none may record the same edit again
        assert (
            httpx.post(f"{gw.v1}/chat/completions", json=BODY, headers=analyst, timeout=60).status_code == 404
        )
        found = tampered()
        assert len(found) == 1, found
        assert "version 1 stays in force" in str(found[0]["event"]["detail"])  # type: ignore[index]
    # A restart has no verified policy to serve: it refuses to start, and says so in the log.
    with pytest.raises(RuntimeError, match="changed outside the API/CLI"), serve(tmp_path):
        pass
    assert any("gateway refused to start" in str(r["event"].get("detail")) for r in gw.audit_records())  # type: ignore[union-attr]
