"""``server.workers = 2``: one ``strongroom serve``, two gateway processes, one audit writer.

Real processes on loopback with the shared Redis: which worker answered is read from /metrics
(every series carries ``worker``, and ``strongroom_gateway_worker_info`` its pid).
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from policies import default_policy
from tests.integration.conftest import wait_for

pytestmark = pytest.mark.integration

LIMIT = 5
_BODY = {"model": "demo-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory, serve: Any) -> Iterator[Any]:
    try:
        redis.Redis(host="127.0.0.1", port=6379, socket_connect_timeout=1).ping()
    except redis.RedisError as exc:
        raise AssertionError(f"these tests need Redis on 127.0.0.1:6379 ({exc})") from exc
    prefix = f"test-{uuid.uuid4().hex}"
    tmp = tmp_path_factory.mktemp("workers")
    # A policy big enough that a worker takes a noticeable time (about half a second) to load a
    # new version: the window in which a worker that only heard of a change would still serve
    # the old one (see test_a_change_through_one_worker_is_in_force_on_both_when_its_call_returns).
    filler = "".join(f"p, filler-{i}, *, filler-model-{i}, chat\n" for i in range(5000))
    filler += "".join(f"g, user:filler-{i}, filler-{i % 50}, *\n" for i in range(500))
    (tmp / "seed.csv").write_text(default_policy().to_csv() + filler)
    env = {
        "STRONGROOM_ACCESS__SEED_POLICY": str(tmp / "seed.csv"),
        # On a busy test machine that load can take longer than the default 2 s.
        "STRONGROOM_ACCESS__SYNC_TIMEOUT_S": "20",
        "STRONGROOM_SERVER__WORKERS": "2",
        "STRONGROOM_REDIS_URL": "redis://127.0.0.1:6379/0",
        "STRONGROOM_QUOTA__KEY_PREFIX": f"{prefix}:quota",
        "STRONGROOM_AUTH__REVOCATION_KEY_PREFIX": f"{prefix}:revoked:",
        "STRONGROOM_ACCESS__CHANNEL": f"{prefix}:policy",
        "STRONGROOM_QUOTA__ROLES": f"{{ limited = {{ requests_per_minute = {LIMIT} }} }}",
    }
    with serve(tmp, args=("--stub-engine",), extra_env=env) as gw:
        yield gw


def _per_worker(gw: Any, *, fresh: bool = True) -> tuple[dict[str, int], dict[str, float]]:
    """pid and answered requests of each worker, from /metrics; ``fresh``: after each worker has
    had its once-a-second publish since the call (on a loaded machine one may be late)."""
    if fresh:
        time.sleep(1.2)
    text = httpx.get(f"{gw.base_url}/metrics", timeout=10).text
    pids: dict[str, int] = {}
    answered: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            worker = sample.labels.get("worker", "")
            if sample.name == "strongroom_gateway_worker_info":
                pids[worker] = int(sample.labels["pid"])
            elif sample.name == "strongroom_requests_total" and sample.labels["route"].startswith("/v1/"):
                answered[worker] = answered.get(worker, 0.0) + sample.value
    return pids, answered


def _answered_by_both(gw: Any, before: dict[str, float]) -> tuple[dict[str, int], dict[str, float]]:
    """``_per_worker`` once both workers' published counts have grown past ``before``."""

    def grown() -> tuple[dict[str, int], dict[str, float]] | None:
        pids, answered = _per_worker(gw, fresh=False)
        return (pids, answered) if all(answered.get(w, 0) > before.get(w, 0) for w in ("0", "1")) else None

    return wait_for(grown, what=f"both workers' answers counted (before: {before})")


def _parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rpartition(")")[2].split()[1])


def _chat(gw: Any, token: str) -> httpx.Response:
    # A client per call: a new connection each time, as the kernel spreads connections, not requests.
    return httpx.post(
        f"{gw.v1}/chat/completions", json=_BODY, headers={"authorization": f"Bearer {token}"}, timeout=60
    )


def test_requests_spread_over_both_worker_processes(workers: Any) -> None:
    token = workers.token("spread", "analyst")
    _, before = _per_worker(workers)
    for _ in range(16):
        assert _chat(workers, token).status_code == 200
    pids, _ = _answered_by_both(workers, before)
    assert sorted(pids) == ["0", "1"] and len(set(pids.values())) == 2
    assert all(_parent_of(pid) == workers.proc.pid for pid in pids.values())


def test_concurrent_requests_through_both_workers_leave_one_verified_chain(workers: Any) -> None:
    token = workers.token("chain", "analyst")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(lambda _: _chat(workers, token), range(32)))
    assert [r.status_code for r in responses] == [200] * 32
    by_request: dict[str, int] = {}
    for record in workers.audit_records(400):
        rid = record["event"].get("request_id")  # type: ignore[attr-defined]
        by_request[rid] = by_request.get(rid, 0) + 1
    assert all(by_request.get(r.headers["x-request-id"]) == 1 for r in responses)
    seqs = [r["seq"] for r in workers.audit_records(400)]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # one chain, no gap, no duplicate
    verify = workers.cli("audit", "verify", check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_quota_is_counted_once_across_workers(workers: Any) -> None:
    token = workers.token("quota-user", "limited", "analyst")
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        statuses = sorted(r.status_code for r in pool.map(lambda _: _chat(workers, token), range(12)))
    assert statuses == [200] * LIMIT + [429] * (12 - LIMIT)


def test_a_change_through_one_worker_is_in_force_on_both_when_its_call_returns(workers: Any) -> None:
    """Regression (#19): the other worker used to find a change only at its next poll or Redis
    announcement, so a revoked caller was still served for up to 0.5 s after the 200."""
    admin = {"authorization": f"Bearer {workers.token('root', 'admin')}"}
    dave = {"authorization": f"Bearer {workers.token('dave', 'trader')}"}
    grant = {"role": "trader", "pattern": "demo-base", "action": "chat"}

    def visible() -> list[list[str]]:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            answers = pool.map(
                lambda _: httpx.get(f"{workers.v1}/models", headers=dave, timeout=10), range(16)
            )
            return [
                [m["id"] for m in r.json()["data"]] if r.status_code == 200 else [r.text] for r in answers
            ]

    def change(path: str) -> None:
        answer = httpx.post(f"{workers.base_url}/admin/{path}", json=grant, headers=admin, timeout=10)
        assert answer.status_code in (200, 201), answer.text

    assert visible() == [[]] * 16
    _, before = _per_worker(workers)
    for _ in range(3):  # no sleep between the 2xx and the checks
        change("grants")
        assert visible() == [["demo-base"]] * 16
        change("grants/remove")
        assert visible() == [[]] * 16
    _answered_by_both(workers, before)  # both workers answered the checks


def test_kill_9_of_a_worker_under_load_loses_no_answered_record(workers: Any) -> None:
    token = workers.token("killed", "analyst")
    pids, _ = _per_worker(workers)
    victim = pids["1"]
    answered: list[str] = []
    num_failed = 0

    def load(_: int) -> None:
        nonlocal num_failed
        for _ in range(15):
            try:
                response = _chat(workers, token)
            except httpx.HTTPError:
                num_failed += 1  # in flight at the killed worker: never answered
                continue
            if response.status_code == 200:
                answered.append(response.headers["x-request-id"])

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        running = [pool.submit(load, i) for i in range(4)]
        time.sleep(0.5)
        os.kill(victim, signal.SIGKILL)
        for future in running:
            future.result()
    assert len(answered) >= 30
    recorded = {r["event"].get("request_id") for r in workers.audit_records(1000)}  # type: ignore[attr-defined]
    assert set(answered) <= recorded, f"answered without a record: {sorted(set(answered) - recorded)[:5]}"
    verify = workers.cli("audit", "verify", check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    deadline = time.monotonic() + 30
    while True:  # the supervisor started a new worker 1
        pids, _ = _per_worker(workers)
        if pids.get("1") not in (None, victim) and _parent_of(pids["1"]) == workers.proc.pid:
            break
        assert time.monotonic() < deadline, "the killed worker was not restarted"
    assert httpx.get(f"{workers.base_url}/readyz", timeout=10).status_code == 200
    assert "gateway worker 1" in workers.log()


def test_every_worker_takes_a_dead_engine_out_of_service_at_once(workers: Any) -> None:
    children = Path(f"/proc/{workers.proc.pid}/task/{workers.proc.pid}/children").read_text().split()
    (engine,) = [
        int(p)
        for p in children
        if b" engine " in Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ")
    ]
    os.kill(engine, signal.SIGKILL)
    deadline = time.monotonic() + 1.5  # supervisor tick (0.1 s) + one heartbeat (0.25 s), with margin
    while True:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda _: httpx.get(f"{workers.base_url}/readyz", timeout=10), range(8)))
        if all(a.status_code == 503 and a.json()["engine"] is False for a in answers):
            break
        assert time.monotonic() < deadline, [a.json() for a in answers]
    deadline = time.monotonic() + 60
    while httpx.get(f"{workers.base_url}/readyz", timeout=10).status_code != 200:  # the restarted engine
        assert time.monotonic() < deadline
        time.sleep(0.2)


def test_sigterm_drains_every_worker_and_closes_the_log(workers: Any) -> None:
    """Last: it stops the module's gateway."""
    pids, _ = _per_worker(workers)
    workers.proc.send_signal(signal.SIGTERM)
    assert workers.proc.wait(timeout=30) == 0
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids.values())
    records = workers.audit_records(20)
    assert records[-1]["event"]["event_type"] == "service_stop"
    verify = workers.cli("audit", "verify", check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr
