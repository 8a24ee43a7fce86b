"""How fast the gateway's engine pool notices a hung or dead engine, and a revived one.

An engine server with the stub backend runs as a child process on a socket this process holds
(as ``serve``'s supervisor does). Per trial: a stream is running when the engine is stopped
(SIGSTOP); we time until the stream fails, then from SIGCONT until the pool routes to it again;
and from SIGKILL until the pool takes it out of service (with the supervisor's process probe).
The baseline is the pool as it was before heartbeats: one probe every 5 s with a 5 s timeout.

    python -m bench.gateway.engine_failover [--trials 5]

Targets (issue "Serving at engine speed"): hang noticed within 2 s, a dead engine out of service
within 1 s, traffic back within 0.5 s of readiness.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.provenance import provenance
from engine.core.sampling_params import SamplingParams
from engine.errors import EngineUnavailableError
from engine.serving.client import EngineClient
from engine.serving.protocol import GenerateRequest
from gateway.engine_pool import EnginePool, Heartbeat

TOKEN = "bench-failover-token"
_ENGINE = """
import socket, sys, uvicorn
from engine.serving.server import EngineServer
from engine.serving.stub_engine import StubEngine
sock = socket.socket(fileno=int(sys.argv[1]))
app = EngineServer(StubEngine(token_delay_s=0.02), sys.argv[2]).app()
uvicorn.Server(uvicorn.Config(app, log_level="error", lifespan="on")).run(sockets=[sock])
"""
OLD = Heartbeat(interval_s=5.0, timeout_s=5.0, misses=1)


def _spawn(sock: socket.socket) -> subprocess.Popen[bytes]:
    fd = sock.fileno()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen([sys.executable, "-c", _ENGINE, str(fd), TOKEN], pass_fds=(fd,), env=env)


async def _until(condition: object, timeout_s: float = 60.0) -> float:
    start = time.monotonic()
    while not condition():  # type: ignore[operator]
        if time.monotonic() - start > timeout_s:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.005)
    return time.monotonic() - start


async def _trial(beat: Heartbeat) -> dict[str, float]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    proc = _spawn(sock)
    client = EngineClient(url, TOKEN, read_timeout_s=120.0)
    pool = EnginePool(
        [client], refresh_s=beat.interval_s, heartbeat=beat, is_process_alive=lambda _: proc.poll() is None
    )
    try:
        await pool.start()
        await _until(lambda: pool.pick("demo-chat") is not None)
        request = GenerateRequest(
            request_id="bench", model="demo-chat", prompt="hi", params=SamplingParams(max_tokens=4000)
        )
        stopped = 0.0
        try:
            async with client.generate(request) as frames:
                async for _ in frames:
                    if not stopped:
                        proc.send_signal(signal.SIGSTOP)
                        stopped = time.monotonic()
        except EngineUnavailableError:
            pass
        hang_s = time.monotonic() - stopped
        proc.send_signal(signal.SIGCONT)
        back_s = await _until(lambda: pool.pick("demo-chat") is not None)
        proc.kill()
        proc.wait()
        dead_s = await _until(lambda: pool.pick("demo-chat") is None)
        return {
            "hang_to_stream_error_s": hang_s,
            "sigcont_to_in_service_s": back_s,
            "kill_to_out_of_service_s": dead_s,
        }
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait()
        await pool.aclose()
        sock.close()


async def _run(trials: int) -> dict[str, object]:
    out: dict[str, object] = {}
    for label, beat in (("heartbeat", Heartbeat()), ("before_refresh_only", OLD)):
        runs = [await _trial(beat) for _ in range(trials)]
        out[label] = {key: round(statistics.median(r[key] for r in runs), 3) for key in runs[0]} | {
            f"{key}_max": round(max(r[key] for r in runs), 3) for key in runs[0]
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    figures = asyncio.run(_run(args.trials))
    result = {"trials": args.trials, **figures, **provenance(sys.argv, "cpu")}
    print(f"{'':32} {'ours (heartbeat)':>18} {'before (5 s refresh)':>22}")
    ours, old = figures["heartbeat"], figures["before_refresh_only"]
    assert isinstance(ours, dict) and isinstance(old, dict)
    for key in ("hang_to_stream_error_s", "sigcont_to_in_service_s", "kill_to_out_of_service_s"):
        print(f"{key:>32} {ours[key]:>15.3f} s {old[key]:>19.3f} s   (max {ours[key + '_max']:.3f} s)")
    out = Path(__file__).resolve().parents[1] / "results" / "engine_failover.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
