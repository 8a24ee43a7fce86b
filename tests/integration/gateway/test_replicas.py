"""Two gateway processes sharing Redis: limits are exact across replicas, policy changes spread."""

from __future__ import annotations

import concurrent.futures
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

pytestmark = pytest.mark.integration

LIMIT = 5
BURST = 14


def _redis_up() -> None:
    try:
        redis.Redis(host="127.0.0.1", port=6379, socket_connect_timeout=1).ping()
    except redis.RedisError as exc:
        raise AssertionError(
            f"these tests need Redis on 127.0.0.1:6379 ({exc}); run scripts/services.sh"
        ) from exc


def test_two_replicas_admit_exactly_the_limit_and_share_policy(tmp_path: Path, serve: Any) -> None:
    _redis_up()
    prefix = f"test-{uuid.uuid4().hex}"
    env = {
        "STRONGROOM_REDIS_URL": "redis://127.0.0.1:6379/0",
        "STRONGROOM_QUOTA__KEY_PREFIX": f"{prefix}:quota",
        "STRONGROOM_AUTH__REVOCATION_KEY_PREFIX": f"{prefix}:revoked:",
        "STRONGROOM_ACCESS__CHANNEL": f"{prefix}:policy",
        "STRONGROOM_QUOTA__ROLES": f"{{ analyst = {{ requests_per_minute = {LIMIT} }} }}",
    }
    with ExitStack() as stack:
        first = stack.enter_context(serve(tmp_path, extra_env=env))
        (tmp_path / "second").mkdir()
        second = stack.enter_context(
            serve(
                tmp_path / "second",
                extra_env={
                    **env,
                    "STRONGROOM_DATA_DIR": str(first.data_dir),
                    # One writer per SQLite audit log (several gateways on one log: PostgreSQL).
                    "STRONGROOM_AUDIT__SQLITE_PATH": "audit/second-replica.db",
                },
            )
        )
        token = first.token("carol", "analyst")
        body = {"model": "demo-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}

        def call(i: int) -> httpx.Response:
            base = (first if i % 2 else second).v1
            return httpx.post(
                f"{base}/chat/completions",
                json=body,
                headers={"authorization": f"Bearer {token}"},
                timeout=60,
            )

        with concurrent.futures.ThreadPoolExecutor(BURST) as pool:
            responses = list(pool.map(call, range(BURST)))
        statuses = sorted(r.status_code for r in responses)
        assert statuses == [200] * LIMIT + [429] * (BURST - LIMIT)
        refused = next(r for r in responses if r.status_code == 429)
        assert refused.json()["error"]["type"] == "rate_limit_error"
        assert int(refused.headers["retry-after"]) >= 1
        assert refused.headers["x-ratelimit-limit-requests"] == str(LIMIT)
        assert refused.headers["x-ratelimit-remaining-requests"] == "0"
        ok = next(r for r in responses if r.status_code == 200)
        assert int(ok.headers["x-ratelimit-remaining-requests"]) < LIMIT

        # A grant made through one replica's admin API is in force on the other within a second.
        admin = {"authorization": f"Bearer {first.token('root', 'admin')}"}
        dave = {"authorization": f"Bearer {first.token('dave', 'trader')}"}
        models = httpx.get(f"{second.v1}/models", headers=dave).json()["data"]
        assert models == []
        grant = httpx.post(
            f"{first.base_url}/admin/grants",
            json={"role": "trader", "pattern": "demo-base", "action": "chat"},
            headers=admin,
        )
        assert grant.status_code == 201, grant.text
        deadline = time.monotonic() + 1.0
        while [m["id"] for m in httpx.get(f"{second.v1}/models", headers=dave).json()["data"]] != [
            "demo-base"
        ]:
            assert time.monotonic() < deadline, "the other replica did not see the grant within 1 s"
            time.sleep(0.05)
