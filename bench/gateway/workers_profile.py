"""Where each process of a ``strongroom serve`` spends its CPU per request, at 1 or more workers.

    load ──▶ strongroom serve (supervisor + n workers, every process sampled) ──▶ stub engine

Every Python process the gateway starts runs ``bench.gateway.cpu_sampler`` behind SIGUSR1 (start)
and SIGUSR2 (stop and dump), installed by a ``sitecustomize`` module on a temporary path that
only this benchmark's gateway sees, so the product has no profiling hook. Each process's CPU over
the sampled window comes from /proc; its samples split that time by part of the tree (as
``bench.gateway.stream_profile`` names them) and by function, so the figures are ms of CPU per
request, comparable between worker counts. One worker runs in the serve process itself (with
its own audit writer); with several, the supervisor is the one audit writer (the feed's owner).

    python -m bench.gateway.workers_profile [--workers 2] [--stream] [--max-tokens 64]
        [--concurrency 32] [--seconds 10] [--output profile.json]
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import click
import msgspec

from bench.gateway.cpu_sampler import load_samples
from bench.gateway.overhead import (
    _chat_body,
    _check_gateway_answer,
    _cpu_seconds,
    _drive,
    _free_port,
    _loop_factory,
    _post,
    _Samples,
    bench_env,
    redis_env,
    stub_engine,
    write_record,
)
from bench.gateway.scaling import _gateway
from bench.gateway.stream_profile import _part

__all__ = ["profile_workers"]

_SITECUSTOMIZE = """\
import os, signal
from pathlib import Path
from bench.gateway.cpu_sampler import CpuSampler

_out = Path(os.environ["BENCH_SAMPLES_DIR"])
_sampler = CpuSampler()
signal.signal(signal.SIGUSR1, lambda *_: _sampler.start())
signal.signal(signal.SIGUSR2, lambda *_: _sampler.stop(_out / f"{os.getpid()}.samples"))
"""


def profile_workers(
    workers: int, *, stream: bool, max_tokens: int, concurrency: int, seconds: float, data_dir: Path
) -> dict[str, Any]:
    engine_token = secrets.token_urlsafe(24)
    engine_port = _free_port()
    env = bench_env(data_dir, engine_token, engine_port)
    env.update(redis_env(f"bench-{uuid.uuid4().hex}"))
    hook, samples_dir = data_dir / "hook", data_dir / "samples"
    hook.mkdir()
    samples_dir.mkdir()
    (hook / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    root = Path(__file__).resolve().parents[2]
    gateway_env = {
        **env,
        "PYTHONPATH": os.pathsep.join([str(hook), str(root), env.get("PYTHONPATH", "")]),
        "BENCH_SAMPLES_DIR": str(samples_dir),
    }
    with (
        stub_engine(env, engine_port) as engine,
        _gateway(gateway_env, workers, engine.pid) as (url, tree, token),
    ):
        _check_gateway_answer(url, token, _chat_body(max_tokens))
        pids = {tree[0]: "supervisor" if len(tree) > 1 else "gateway"}
        pids.update({p: f"worker {i}" for i, p in enumerate(tree[1:])})
        request = _post(
            "/v1/chat/completions",
            url.removeprefix("http://"),
            {"authorization": f"Bearer {token}", "content-type": "application/json"},
            msgspec.json.encode(_chat_body(max_tokens, stream=stream)),
        )
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(_drive(url, request, concurrency, 1.0, _Samples()))  # warm-up
            load = _Samples()
            before = {pid: _cpu_seconds(pid) or 0.0 for pid in pids}
            threads_before = {pid: _thread_cpu(pid) for pid in pids}
            for pid in pids:
                os.kill(pid, signal.SIGUSR1)
            runner.run(_drive(url, request, concurrency, seconds, load))
            for pid in pids:
                os.kill(pid, signal.SIGUSR2)
            cpu = {pid: (_cpu_seconds(pid) or 0.0) - before[pid] for pid in pids}
            threads = {pid: _thread_cpu(pid) for pid in pids}
        deadline = time.monotonic() + 30
        while len(list(samples_dir.iterdir())) < len(pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
    num_requests = len(load.latencies)
    processes = {
        role: _attribute(samples_dir / f"{pid}.samples", cpu[pid], num_requests) for pid, role in pids.items()
    }
    for pid, role in pids.items():
        processes[role]["threads_ms_per_request"] = {
            name: (cpu_s - threads_before[pid].get(name, 0.0)) / max(1, num_requests) * 1000
            for name, cpu_s in threads[pid].items()
            if cpu_s > threads_before[pid].get(name, 0.0)
        }
    return {
        "workers": workers,
        "num_requests": num_requests,
        "rps": num_requests / load.elapsed_s,
        "errors": load.errors,
        "cpu_ms_per_request": sum(cpu.values()) / max(1, num_requests) * 1000,
        "processes": processes,
    }


def _thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds per thread of a process, by thread name and id (/proc/<pid>/task)."""
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        out[f"{name}/{task.name}"] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def _attribute(path: Path, cpu_s: float, num_requests: int) -> dict[str, Any]:
    """A process's CPU per request, split by its samples (own time) per part and per function."""
    num_samples, own, inclusive = load_samples(path)
    per_sample_ms = cpu_s / max(1, num_samples) / max(1, num_requests) * 1000
    parts: dict[str, float] = {}
    for (filename, _, name), count in own.items():
        part = _part(filename, name)
        parts[part] = parts.get(part, 0.0) + count * per_sample_ms

    def top(counts: dict[tuple[str, int, str], int]) -> dict[str, float]:
        rows = sorted(counts.items(), key=lambda kv: -kv[1])[:40]
        return {f"{Path(f).name}:{line}:{name}": c * per_sample_ms for (f, line, name), c in rows}

    return {
        "cpu_ms_per_request": cpu_s / max(1, num_requests) * 1000,
        "num_samples": num_samples,
        "parts_ms_per_request": dict(sorted(parts.items(), key=lambda kv: -kv[1])),
        "top_own_ms_per_request": top(own),
        "top_inclusive_ms_per_request": top(inclusive),
    }


@click.command()
@click.option("--workers", type=int, default=2, show_default=True)
@click.option("--stream/--no-stream", default=False, show_default=True)
@click.option("--max-tokens", type=int, default=4, show_default=True)
@click.option("--concurrency", type=int, default=32, show_default=True)
@click.option("--seconds", type=float, default=10.0, show_default=True)
@click.option("--output", type=click.Path(path_type=Path), default=None)
def main(
    workers: int, stream: bool, max_tokens: int, concurrency: int, seconds: float, output: Path | None
) -> None:
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="strongroom-profile-") as tmp:
        result = profile_workers(
            workers,
            stream=stream,
            max_tokens=max_tokens,
            concurrency=concurrency,
            seconds=seconds,
            data_dir=Path(tmp),
        )
    click.echo(
        f"{result['workers']} worker(s): {result['rps']:.0f} req/s, {result['cpu_ms_per_request']:.3f} ms/req"
    )
    for role, p in result["processes"].items():
        click.echo(f"  {role}: {p['cpu_ms_per_request']:.3f} ms/req ({p['num_samples']} samples)")
        for name, ms in p["threads_ms_per_request"].items():
            click.echo(f"    thread {name:25} {ms:.3f}")
        for part, ms in p["parts_ms_per_request"].items():
            click.echo(f"    {part:32} {ms:.3f}")
    config = {"workers": workers, "stream": stream, "max_tokens": max_tokens, "concurrency": concurrency}
    click.echo(f"wrote {write_record('gateway_workers_profile', load_before, config, result, output)}")


if __name__ == "__main__":
    main()
