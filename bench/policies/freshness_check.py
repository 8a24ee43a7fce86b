"""What keeping the policy in step costs a request, beside what the alternative would have.

Per decision: the bare decision table, then ``Authorizer.allowed`` with this host's version
board and a lease (the check every decision now makes), then a Redis ``GET`` of a version key
(the per-request round trip the board and lease avoid; skipped without Redis on 127.0.0.1:6379).
Also one ``StageTimer.done`` (a stage latency observed on /metrics). Prints p50/p99 in
microseconds and writes bench/results/freshness_check.json.

    PYTHONPATH=$PWD .venv/bin/python bench/policies/freshness_check.py [--samples 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from prometheus_client import CollectorRegistry

from bench.provenance import provenance
from common.principal import Principal
from gateway.stage_timer import StageTimer, now_ns
from policies import AccessConfig, Authorizer, default_policy
from policies.policy_store import PolicyStore
from policies.version_board import VersionBoard

ANALYST = Principal(subject="ann", roles=("analyst",), issuer="i")


def _timed(samples: int, call: Callable[[], object]) -> list[float]:
    out = []
    for _ in range(samples):
        t0 = time.perf_counter_ns()
        call()
        out.append((time.perf_counter_ns() - t0) / 1000)
    return out


def _summary(samples: list[float]) -> dict[str, float]:
    return {
        "p50_us": round(statistics.median(samples), 3),
        "p99_us": round(statistics.quantiles(samples, n=100)[98], 3),
    }


async def _redis_get(samples: int) -> list[float] | None:
    from redis.asyncio import Redis
    from redis.exceptions import RedisError

    client = Redis(host="127.0.0.1", port=6379, socket_connect_timeout=0.5)
    try:
        await client.set("bench:policy:version", "1")
        out = []
        for _ in range(samples):
            t0 = time.perf_counter_ns()
            await client.get("bench:policy:version")
            out.append((time.perf_counter_ns() - t0) / 1000)
        return out
    except (RedisError, OSError):
        return None
    finally:
        await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=20_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = PolicyStore(Path(tmp) / "policy.db", default_policy())
        board = VersionBoard(Path(tmp) / "policy.db-version")
        authz = Authorizer(store, config=AccessConfig(lease_s=3600.0, poll_interval_s=1.0), board=board)
        table = authz._table
        _timed(2000, lambda: authz.allowed(ANALYST, "chat", "demo-chat"))  # warm the memo

        def unchecked() -> bool:  # what ``allowed`` did before the check existed
            return table.allows(authz.members_of(ANALYST), authz.domain_of(ANALYST), "chat", "demo-chat")

        bare = _timed(args.samples, unchecked)
        checked = _timed(args.samples, lambda: authz.allowed(ANALYST, "chat", "demo-chat"))
        board_read = _timed(args.samples, board.version)
        stages = StageTimer(CollectorRegistry())
        observe = _timed(args.samples, lambda: stages.done("policy", "demo-chat", now_ns()))
    redis_get = asyncio.run(_redis_get(min(args.samples, 5000)))
    result = {
        "allowed_before_the_check": _summary(bare),
        "allowed_with_board_and_lease": _summary(checked),
        "board_read": _summary(board_read),
        "stage_timer_done": _summary(observe),
        "redis_get_per_request": _summary(redis_get) if redis_get else "no Redis",
        "samples": args.samples,
        "python": sys.version.split()[0],
        **provenance(sys.argv, "cpu"),
    }
    for key, value in result.items():
        print(f"{key:>30}: {value}")
    out = Path(__file__).resolve().parents[1] / "results" / "freshness_check.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
