"""Where a gateway worker's CPU goes per streamed token: cProfile of the gateway under load.

    load (streamed chats) ──▶ strongroom serve under cProfile (1 worker) ──▶ stub engine

The gateway runs with a cProfile profiler that counts its event-loop thread's CPU time (not wall
time: waits cost nothing), switched on by SIGUSR1 once it is warm and off by SIGUSR2 when the
load ends, so start-up is left out. Own time (``tottime``) is summed per part of the tree (the
engine link, the rest of the gateway, litestar, uvicorn, the filters, the audit log, msgspec, the
event loop) and divided by the tokens streamed. cProfile inflates Python-heavy code more than C,
so read the shares, not the absolute figures; ``strongroom bench gateway`` gives the uninflated
CPU per token.

With ``--sampled`` the gateway is sampled instead (``bench.gateway.cpu_sampler``: CPU time of
the whole process, no per-call cost): shares only, per part and per function.

    python -m bench.gateway.stream_profile [--filters] [--redis] [--sampled] [--seconds 10] [--concurrency 32] [--max-tokens 64]
        [--keep-stats gateway.prof]
"""

from __future__ import annotations

import asyncio
import cProfile
import os
import pstats
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import click
import msgspec

from bench.gateway.cpu_sampler import CpuSampler, Key, load_samples
from bench.gateway.overhead import (
    _chat_body,
    _check_gateway_answer,
    _drive,
    _free_ports,
    _loop_factory,
    _post,
    _Samples,
    _wait,
    bench_env,
    bench_token,
    redis_env,
    write_record,
)

_SERVE_PROFILED = "--serve-profiled"
_SERVE_SAMPLED = "--serve-sampled"

_PARTS = (
    ("engine link", ("engine/serving/",)),
    ("filters", ("/filters/",)),
    ("audit", ("/audit/",)),
    ("gateway", ("/gateway/",)),
    ("litestar", ("litestar/",)),
    ("uvicorn + httptools", ("uvicorn/", "httptools")),
    ("websockets", ("websockets/",)),
    ("msgspec", ("msgspec",)),
    ("anyio", ("anyio/",)),
    ("event loop (asyncio, uvloop)", ("asyncio/", "uvloop", "<built-in method select", "selectors")),
    ("socket I/O", ("socket", "<method 'send", "<method 'recv")),
    ("other libraries", ("site-packages/",)),
    ("Python's standard library", ("/lib/python3",)),
)


def _part(filename: str, name: str) -> str:
    where = f"{filename}:{name}"
    for part, needles in _PARTS:
        if any(n in where for n in needles):
            return part
    return "other"


def profile(
    seconds: float,
    concurrency: int,
    max_tokens: int,
    filters: bool,
    data_dir: Path,
    *,
    redis: bool = False,
    sampled: bool = False,
) -> dict[str, Any]:
    engine_token = secrets.token_urlsafe(24)
    engine_port, gw_port = _free_ports(2)
    env = bench_env(data_dir, engine_token, engine_port, filters=filters)
    if redis:  # quotas and revocations in Redis, as `strongroom bench gateway --workers` runs them
        env.update(redis_env(f"bench-{uuid.uuid4().hex}"))
        env["STRONGROOM_SERVER__WORKERS"] = "1"  # with Redis the default is one per core
    env["STRONGROOM_SERVER__PORT"] = str(gw_port)
    cmd = [sys.executable, "-m", "strongroom"]
    out = data_dir / "gateway.prof"
    engine = subprocess.Popen(
        [*cmd, "engine", "--stub", "--port", str(engine_port)], env=env, stderr=subprocess.DEVNULL
    )
    try:
        _wait(f"http://127.0.0.1:{engine_port}/engine/v1/health", {"authorization": f"Bearer {engine_token}"})
        log = data_dir / "gateway.log"
        with log.open("wb") as log_file:
            gateway = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "bench.gateway.stream_profile",
                    _SERVE_SAMPLED if sampled else _SERVE_PROFILED,
                    str(out),
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=log_file,
            )
        url = f"http://127.0.0.1:{gw_port}"
        try:
            _wait(f"{url}/readyz", timeout_s=60)
        except RuntimeError:
            gateway.kill()
            raise RuntimeError(f"the profiled gateway did not start:\n{log.read_text()[-3000:]}") from None
        token = bench_token(env)
        _check_gateway_answer(url, token, _chat_body(4))
        headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
        request = _post(
            "/v1/chat/completions",
            url.removeprefix("http://"),
            headers,
            msgspec.json.encode(_chat_body(max_tokens, stream=True)),
        )
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(_drive(url, request, concurrency, 1.0, _Samples()))  # warm-up
            samples = _Samples(max_tokens)
            gateway.send_signal(signal.SIGUSR1)
            runner.run(_drive(url, request, concurrency, seconds, samples))
            gateway.send_signal(signal.SIGUSR2)
        deadline = time.monotonic() + 60
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # the dump is written in one go, but let it finish
        gateway.send_signal(signal.SIGTERM)
        gateway.wait(timeout=120)
    finally:
        engine.terminate()
        engine.wait(timeout=20)
    num_tokens = len(samples.latencies) * max_tokens
    if sampled:
        return {"num_requests": len(samples.latencies), "num_tokens": num_tokens, **_sampled_shares(out)}
    stats = pstats.Stats(str(out))
    by_part: dict[str, float] = {}
    top = []
    for (filename, _, name), (_, num_calls, tottime, _, callers) in stats.stats.items():  # type: ignore[attr-defined]
        part = _part(filename, name)
        top.append((tottime, f"{Path(filename).name}:{name}", part, num_calls))
        if filename != "~" or not callers:
            by_part[part] = by_part.get(part, 0.0) + tottime
            continue
        # A built-in (len, isinstance, dict.get) counts for the code that called it.
        for (caller_file, _, caller_name), (_, _, caller_tottime, _) in callers.items():
            caller_part = _part(caller_file, caller_name)
            by_part[caller_part] = by_part.get(caller_part, 0.0) + caller_tottime
    total = sum(by_part.values())
    top.sort(reverse=True)
    return {
        "num_requests": len(samples.latencies),
        "num_tokens": num_tokens,
        "errors": samples.errors,
        "profiled_cpu_s": total,
        "profiled_us_per_token": total / max(1, num_tokens) * 1e6,
        "parts": {
            part: {"share": s / total, "us_per_token": s / max(1, num_tokens) * 1e6}
            for part, s in sorted(by_part.items(), key=lambda kv: -kv[1])
        },
        "top": [
            {
                "function": f,
                "part": p,
                "us_per_token": t / max(1, num_tokens) * 1e6,
                "calls_per_token": c / max(1, num_tokens),
            }
            for t, f, p, c in top[:40]
        ],
    }


def _sampled_shares(out: Path) -> dict[str, Any]:
    """Shares of the CPU samples: per part (own time) and the top functions, own and inclusive."""
    num_samples, own, inclusive = load_samples(out)
    by_part: dict[str, int] = {}
    for (filename, _, name), count in own.items():
        part = _part(filename, name)
        by_part[part] = by_part.get(part, 0) + count

    def top(counts: dict[Key, int]) -> list[dict[str, Any]]:
        rows = sorted(counts.items(), key=lambda kv: -kv[1])[:40]
        return [
            {"function": f"{Path(f).name}:{line}:{name}", "part": _part(f, name), "share": c / num_samples}
            for (f, line, name), c in rows
        ]

    return {
        "num_samples": num_samples,
        "parts": {
            part: {"share": c / max(1, num_samples)}
            for part, c in sorted(by_part.items(), key=lambda kv: -kv[1])
        },
        "top_own": top(own),
        "top_inclusive": top(inclusive),
    }


@click.command()
@click.option("--seconds", type=float, default=10.0, show_default=True)
@click.option("--concurrency", type=int, default=32, show_default=True)
@click.option("--max-tokens", type=int, default=64, show_default=True)
@click.option("--filters/--no-filters", default=False, show_default=True)
@click.option(
    "--sampled",
    is_flag=True,
    help="Sample the process's CPU time (SIGPROF) instead of cProfile: shares only.",
)
@click.option("--redis/--no-redis", default=False, show_default=True, help="Quotas and revocations in Redis.")
@click.option("--output", type=click.Path(path_type=Path), default=None)
@click.option(
    "--keep-stats",
    type=click.Path(path_type=Path),
    default=None,
    help="Also keep the raw cProfile stats here (pstats: callers, call chains).",
)
def main(
    seconds: float,
    concurrency: int,
    max_tokens: int,
    filters: bool,
    sampled: bool,
    redis: bool,
    output: Path | None,
    keep_stats: Path | None,
) -> None:
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="strongroom-profile-") as tmp:
        result = profile(seconds, concurrency, max_tokens, filters, Path(tmp), redis=redis, sampled=sampled)
        if keep_stats is not None:
            shutil.copyfile(Path(tmp) / "gateway.prof", keep_stats)
    if sampled:
        _echo_shares(result)
    else:
        _echo_profile(result)
    config = {
        "seconds": seconds,
        "concurrency": concurrency,
        "max_tokens": max_tokens,
        "filters": filters,
        "redis": redis,
        "profiler": "CPU-time samples (SIGPROF)" if sampled else "cProfile (thread CPU time)",
    }
    click.echo(f"wrote {write_record('gateway_stream_profile', load_before, config, result, output)}")


def _echo_shares(result: dict[str, Any]) -> None:
    click.echo(
        f"{result['num_tokens']} tokens in {result['num_requests']} streams; "
        f"{result['num_samples']} CPU samples of the gateway"
    )
    for part, row in result["parts"].items():
        click.echo(f"  {part:32} {row['share']:6.1%}")
    for title, key in (("own time", "top_own"), ("inclusive", "top_inclusive")):
        click.echo(f"top functions ({title}):")
        for row in result[key][:20]:
            click.echo(f"  {row['share']:6.1%}  {row['function']}  [{row['part']}]")


def _echo_profile(result: dict[str, Any]) -> None:
    click.echo(
        f"{result['num_tokens']} tokens in {result['num_requests']} streams; profiled gateway CPU "
        f"{result['profiled_us_per_token']:.1f} µs/token (cProfile-inflated)"
    )
    for part, row in result["parts"].items():
        click.echo(f"  {part:32} {row['share']:6.1%}  {row['us_per_token']:7.2f} µs/token")
    click.echo("top functions (own time):")
    for row in result["top"][:15]:
        click.echo(
            f"  {row['us_per_token']:7.2f} µs/token  {row['calls_per_token']:5.2f} calls/token"
            f"  {row['function']}  [{row['part']}]"
        )


def _serve_profiled(out: str) -> None:
    """``strongroom serve`` (one worker) with a profiler of this thread's CPU time behind signals."""
    profiler = cProfile.Profile(time.thread_time)

    def stop(*_: object) -> None:
        profiler.disable()
        profiler.dump_stats(out)

    signal.signal(signal.SIGUSR1, lambda *_: profiler.enable())
    signal.signal(signal.SIGUSR2, stop)
    from strongroom.cli import main as strongroom

    sys.argv = ["strongroom", "serve"]
    strongroom()


def _serve_sampled(out: str) -> None:
    """``strongroom serve`` (one worker) with a sampler of the process's CPU time behind signals."""
    sampler = CpuSampler()
    signal.signal(signal.SIGUSR1, lambda *_: sampler.start())
    signal.signal(signal.SIGUSR2, lambda *_: sampler.stop(Path(out)))
    from strongroom.cli import main as strongroom

    sys.argv = ["strongroom", "serve"]
    strongroom()


if __name__ == "__main__":
    if sys.argv[1:2] == [_SERVE_PROFILED]:
        _serve_profiled(sys.argv[2])
    elif sys.argv[1:2] == [_SERVE_SAMPLED]:
        _serve_sampled(sys.argv[2])
    else:
        main()
