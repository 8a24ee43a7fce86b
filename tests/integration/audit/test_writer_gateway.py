"""The gateway owns its SQLite audit log: operator commands beside it, a dying store, kill -9.

Issue 17, findings 1, 6 and 7 against the real ``strongroom serve`` and CLI processes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import wait_for
from tests.ports import free_port

pytestmark = pytest.mark.integration

_STUB = ("--stub-engine",)
_SMALL_CHECKPOINTS = {"STRONGROOM_AUDIT__CHECKPOINT_EVERY": "5"}


def _chat(gw: Any, token: str, **extra: Any) -> httpx.Response:
    body = {"model": "demo-chat", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, **extra}
    return httpx.post(
        f"{gw.v1}/chat/completions", json=body, headers={"authorization": f"Bearer {token}"}, timeout=30
    )


def _records(gw: Any) -> list[dict[str, Any]]:
    return gw.audit_records(5000)


def _request_ids(gw: Any) -> set[str]:
    return {str(r["event"].get("request_id", "")) for r in _records(gw)}


def test_operator_commands_beside_a_live_gateway_lose_no_record(serve: Any, tmp_path: Path) -> None:
    """The README's compliance commands while the gateway runs, then kill -9: every answered
    request keeps its record, the commands themselves are on the record, and the data directory
    is private."""
    with serve(tmp_path, args=_STUB, extra_env=_SMALL_CHECKPOINTS) as gw:
        token = gw.token("alice", "analyst")
        answered = [_chat(gw, token).headers["x-request-id"] for _ in range(12)]  # checkpoints ran
        gw.cli("audit", "tail", "-n", "3")
        gw.cli("audit", "search", "--subject", "alice")
        gw.cli("audit", "export", str(tmp_path / "out.jsonl"))
        # the commands appended through the gateway; the gateway still holds the writer lock
        assert "locked" not in gw.cli("audit", "tail", "-n", "1").stdout
        answered += [_chat(gw, token).headers["x-request-id"] for _ in range(12)]
        assert all(r for r in answered)
        gw.proc.send_signal(signal.SIGKILL)
        gw.proc.wait()
        ids = _request_ids(gw)
        assert set(answered) <= ids, f"lost: {sorted(set(answered) - ids)}"
        details = [str(r["event"].get("detail", "")) for r in _records(gw)]
        assert any(d.startswith("search ") for d in details) and any(d.startswith("export ") for d in details)
        verify = gw.cli("audit", "verify")
        assert verify.stdout.startswith("OK:"), verify.stdout + verify.stderr
        # Finding 7: audit.db, policy.db and revocations.db were 0644 in 0755 folders.
        gw.cli("admin", "grant", "analyst", "demo-*")
        gw.cli("admin", "revoke", "--sub", "bob", "--before", "1700000000")
        loose = [
            f"{path.relative_to(gw.data_dir)} {oct(stat.S_IMODE(os.lstat(path).st_mode))}"
            for path in [gw.data_dir, *gw.data_dir.rglob("*")]
            if stat.S_IMODE(os.lstat(path).st_mode) & 0o077
        ]
        assert not loose, loose
        assert {"audit.db", "policy.db", "revocations.db"} <= {p.name for p in gw.data_dir.rglob("*")}


def test_readyz_reports_audit_and_redis_and_v1_fails_closed_within_one_request(
    serve: Any, tmp_path: Path
) -> None:
    if shutil.which("chattr") is None or shutil.which("redis-server") is None:
        pytest.skip("needs chattr and redis-server")
    port = free_port()
    redis = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL
    )
    env = {**_SMALL_CHECKPOINTS, "STRONGROOM_REDIS_URL": f"redis://127.0.0.1:{port}/0"}
    try:
        with serve(tmp_path, args=_STUB, extra_env=env) as gw:
            ready = httpx.get(f"{gw.base_url}/readyz").json()
            assert ready == {"ready": True, "models": 3, "engine": True, "audit": True, "redis": True}
            token = gw.token("alice", "analyst")
            assert _chat(gw, token).status_code == 200
            audit_files = [str(gw.data_dir / "audit" / n) for n in ("audit.db", "audit.db-wal")]
            subprocess.run(["chattr", "+i", *audit_files], check=True)
            try:
                assert _chat(gw, token).status_code == 503  # the first request after the store broke
                probe = httpx.get(f"{gw.base_url}/readyz")
                assert probe.status_code == 503 and probe.json()["audit"] is False
            finally:
                subprocess.run(["chattr", "-i", *audit_files], check=True)
            deadline = time.monotonic() + 10  # the writer retries on its own, without traffic
            while httpx.get(f"{gw.base_url}/readyz").status_code != 200:
                assert time.monotonic() < deadline, "audit never came back"
                time.sleep(0.1)
            redis.kill()
            redis.wait()
            probe = httpx.get(f"{gw.base_url}/readyz")
            assert probe.status_code == 503 and probe.json()["redis"] is False
            outages = [r for r in _records(gw) if r["event"]["event_type"] == "audit_outage"]
            assert len(outages) == 1 and "1 appends refused (answered 503)" in outages[0]["event"]["reason"]
    finally:
        redis.kill()
        redis.wait()


def test_a_stream_whose_final_record_fails_ends_with_an_error_not_done(serve: Any, tmp_path: Path) -> None:
    """Finding 6: ``[DONE]`` went out before the stream's final record, which then failed."""
    if shutil.which("chattr") is None:
        pytest.skip("needs chattr")
    with serve(tmp_path) as gw:  # the demo engine: tokens take long enough to break the store mid-stream
        token = gw.token("alice", "analyst")
        audit_files = [str(gw.data_dir / "audit" / n) for n in ("audit.db", "audit.db-wal")]
        body = {"model": "demo-chat", "prompt": "Hi", "max_tokens": 1500, "stream": True, "ignore_eos": True}
        events: list[str] = []
        try:
            with httpx.stream(
                "POST",
                f"{gw.v1}/completions",
                json=body,
                headers={"authorization": f"Bearer {token}"},
                timeout=60,
            ) as response:
                assert response.status_code == 200
                request_id = response.headers["x-request-id"]
                for line in response.iter_lines():
                    if not line.startswith("data: "):
                        continue
                    if not events:  # "stream started" is durable: now the store goes away
                        subprocess.run(["chattr", "+i", *audit_files], check=True)
                    events.append(line[len("data: ") :])
        finally:
            subprocess.run(["chattr", "-i", *audit_files], check=True)
        assert "[DONE]" not in events
        assert json.loads(events[-1])["error"]["code"] == "audit_unavailable"

        def with_outage() -> list[dict[str, Any]]:
            records = _records(gw)
            return records if any(r["event"]["event_type"] == "audit_outage" for r in records) else []

        records = wait_for(with_outage, what="the outage record the writer's retry writes")
        mine = [r["event"]["reason"] for r in records if r["event"].get("request_id") == request_id]
        assert mine == ["stream started"]
        [outage] = [r for r in records if r["event"]["event_type"] == "audit_outage"]
        reason = outage["event"]["reason"]
        assert (
            "0 appends refused (answered 503); 1 streams ended with an error event instead of [DONE]"
            in reason
        )
