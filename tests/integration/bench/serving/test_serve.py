"""bench.serving.serve against a real SSE server on loopback (asyncio streams, HTTP/1.1)."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bench.engine.workload import Workload
from bench.serving.metrics import SLO
from bench.serving.serve import run_serve

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

FAIL_TOKEN = 666


class SSEServer:
    """Streams one chunk per requested token, then a usage chunk and [DONE]; 500 on FAIL_TOKEN."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.authorizations: list[str | None] = []
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        assert lines[0].startswith("POST /v1/completions ")
        headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
        length = int({k.lower(): v for k, v in headers.items()}["content-length"])
        body = json.loads(await reader.readexactly(length))
        self.bodies.append(body)
        self.authorizations.append({k.lower(): v for k, v in headers.items()}.get("authorization"))
        if FAIL_TOKEN in body["prompt"]:
            writer.write(
                b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\nConnection: close\r\n\r\nboom"
            )
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
            for i in range(body["max_tokens"]):
                chunk = {"choices": [{"index": 0, "text": f"t{i} ", "finish_reason": None}]}
                writer.write(f"data: {json.dumps(chunk)}\n\n".encode())
                await writer.drain()
            usage = {
                "choices": [],
                "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": body["max_tokens"]},
            }
            writer.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        await writer.drain()
        writer.close()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def server() -> AsyncIterator[SSEServer]:
    sse = SSEServer()
    tcp = await asyncio.start_server(sse.handle, "127.0.0.1", 0)
    sse.port = tcp.sockets[0].getsockname()[1]
    async with tcp:
        yield sse


WORKLOAD = Workload(prompt_token_ids=[[1, 2, 3], [4, 5], [6]], max_tokens=[4, 1, 3])


async def test_sequential_run_gives_exact_metrics(server: SSEServer) -> None:
    # One request at a time and a clock that ticks once per reading: every timing is an exact count.
    ticks = itertools.count()
    slept: list[float] = []
    finished: list[tuple[int, int]] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    metrics = await run_serve(
        progress=lambda done, total: finished.append((done, total)),
        base_url=f"http://127.0.0.1:{server.port}",
        model="tiny",
        workload=WORKLOAD,
        request_rate=2.0,
        max_concurrency=1,
        slo=SLO(e2e_ms=3500),
        clock=lambda: float(next(ticks)),
        sleep=fake_sleep,
    )
    assert len(slept) == 2  # a Poisson gap before every request but the first
    assert finished == [(1, 3), (2, 3), (3, 3)]  # what `strongroom bench serve` draws its bar from
    assert metrics.num_completed == 3 and metrics.num_failed == 0
    assert metrics.num_output_tokens == 8 and metrics.num_prompt_tokens == 6
    # Each request: one reading at send, one per text chunk -> TTFT 1 s, ITL 1 s, E2E = chunks s.
    assert metrics.ttft.mean_ms == 1000.0
    assert metrics.itl.mean_ms == 1000.0 and metrics.itl.p99_ms == 1000.0
    assert metrics.e2e.mean_ms == pytest.approx((4 + 1 + 3) / 3 * 1000)
    assert metrics.tpot.mean_ms == 1000.0
    # Only the requests with E2E <= 3.5 s (1 and 3 chunks) meet the SLO.
    assert metrics.goodput == pytest.approx(2 / metrics.duration_s)
    assert [b["max_tokens"] for b in sorted(server.bodies, key=lambda b: b["prompt"])] == [4, 1, 3]
    assert server.authorizations == [None, None, None]
    assert all(
        b["stream"] is True and b["ignore_eos"] is True and b["model"] == "tiny" for b in server.bodies
    )


async def test_concurrent_run_with_a_failing_request(server: SSEServer) -> None:
    workload = Workload(prompt_token_ids=[[1] * 5 for _ in range(8)] + [[FAIL_TOKEN]], max_tokens=[6] * 9)
    metrics = await run_serve(
        base_url=f"http://127.0.0.1:{server.port}",
        model="tiny",
        workload=workload,
        request_rate=float("inf"),
        api_key="sk-test",
    )
    assert server.authorizations == ["Bearer sk-test"] * 9
    assert metrics.num_completed == 8 and metrics.num_failed == 1
    assert metrics.errors == ["HTTP 500: boom"]
    assert metrics.num_output_tokens == 48
    assert metrics.output_throughput == pytest.approx(48 / metrics.duration_s)
    assert 0 < metrics.ttft.median_ms <= metrics.e2e.median_ms
    assert metrics.goodput is None


async def test_unreachable_server_counts_as_failures() -> None:
    metrics = await run_serve(
        base_url="http://127.0.0.1:9", model="tiny", workload=WORKLOAD, request_rate=float("inf"), timeout_s=5
    )
    assert metrics.num_completed == 0 and metrics.num_failed == 3
    assert all(e.startswith("ConnectError") for e in metrics.errors)
