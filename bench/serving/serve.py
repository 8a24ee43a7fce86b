"""Online serving benchmark: Poisson arrivals against an OpenAI-compatible ``/v1/completions``.

    python -m bench.serving.serve --base-url http://127.0.0.1:8000 --model qwen3 --request-rate 4 --scale 0.1

Requests follow nano-vllm's workload (token-id prompts, per-request max_tokens, ignore_eos) and
stream; arrivals are a Poisson process at ``--request-rate`` requests/s (``inf``: all at once), with
gaps drawn from ``random.Random(seed).expovariate(rate)``, as vLLM's ``bench serve`` does. The
metrics are the client's, so any OpenAI-compatible server is measured the same way.

``--peer hf --peer-model-dir DIR`` then runs the identical workload (same seed, same arrivals)
through HF transformers in the same run: ``bench.serving.hf_server`` on a free loopback port, its
continuous batching manager by default (``--peer-mode generate``: sequential ``generate``).
Both tables print side by side with ratios (> 1: ours better), and both go into the JSON.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import random
import shlex
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click
import httpx

from bench.engine.hf_generator import MODES
from bench.engine.workload import Workload, nano_vllm_workload
from bench.provenance import provenance
from bench.serving.metrics import (
    SLO,
    RequestTiming,
    ServeMetrics,
    compare,
    compute_metrics,
)
from bench.serving.peer import PeerSpec, ServePeer
from bench.serving.report import format_comparison, format_metrics, redacted
from strongroom.progress_bar import ProgressBar

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]
RESULTS_DIR = Path(__file__).resolve().parents[1] / "results"


def arrival_gaps(num_requests: int, request_rate: float, seed: int) -> list[float]:
    """Seconds to wait before each request; the first request goes at once."""
    if request_rate <= 0:
        raise ValueError("request rate must be positive")
    if math.isinf(request_rate):
        return [0.0] * num_requests
    rng = random.Random(seed)
    return [0.0] + [rng.expovariate(request_rate) for _ in range(num_requests - 1)]


async def send_request(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    *,
    num_prompt_tokens: int,
    clock: Clock = time.perf_counter,
) -> RequestTiming:
    """Stream one completion; time every chunk that carries text."""
    start = clock()
    chunk_times: list[float] = []
    usage_tokens: int | None = None
    try:
        async with client.stream("POST", url, json=body) as response:
            if response.status_code != 200:
                detail = (await response.aread()).decode(errors="replace")[:200]
                return RequestTiming(success=False, error=f"HTTP {response.status_code}: {detail}")
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    return RequestTiming(success=False, error=str(chunk["error"])[:200])
                if chunk.get("usage"):
                    usage_tokens = chunk["usage"].get("completion_tokens")
                choices = chunk.get("choices") or []
                if choices and choices[0].get("text"):
                    chunk_times.append(clock())
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        return RequestTiming(success=False, error=f"{type(exc).__name__}: {exc}")
    if not chunk_times:
        return RequestTiming(success=False, error="no text in the stream")
    end = chunk_times[-1]
    return RequestTiming(
        success=True,
        ttft_s=chunk_times[0] - start,
        e2e_s=end - start,
        itl_s=tuple(b - a for a, b in itertools.pairwise(chunk_times)),
        # Without a usage chunk, one text chunk is taken for one token (vLLM does the same).
        num_output_tokens=usage_tokens if usage_tokens is not None else len(chunk_times),
        num_prompt_tokens=num_prompt_tokens,
    )


def completion_body(model: str, prompt: list[int], max_tokens: int, temperature: float) -> dict[str, Any]:
    return {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def run_serve(
    *,
    base_url: str,
    model: str,
    workload: Workload,
    request_rate: float,
    seed: int = 0,
    max_concurrency: int | None = None,
    slo: SLO | None = None,
    clock: Clock = time.perf_counter,
    sleep: Sleep = asyncio.sleep,
    transport: httpx.AsyncBaseTransport | None = None,
    timeout_s: float = 600.0,
    api_key: str | None = None,
    num_warmup: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> ServeMetrics:
    """Send the workload at Poisson arrivals; ``num_warmup`` untimed short requests go first, one by one.

    ``progress`` is told (requests finished, requests in all) as each timed request ends."""
    finished = 0
    gaps = arrival_gaps(workload.num_requests, request_rate, seed)
    limit = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    url = base_url.rstrip("/") + "/v1/completions"
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx.AsyncClient(
        timeout=timeout_s, limits=limits, transport=transport, headers=headers
    ) as client:

        async def send(i: int) -> RequestTiming:
            body = completion_body(
                model, workload.prompt_token_ids[i], workload.max_tokens[i], workload.temperature
            )
            num_prompt = len(workload.prompt_token_ids[i])
            if limit is None:
                return await send_request(client, url, body, num_prompt_tokens=num_prompt, clock=clock)
            async with limit:
                return await send_request(client, url, body, num_prompt_tokens=num_prompt, clock=clock)

        async def one(i: int) -> RequestTiming:
            nonlocal finished
            timing = await send(i)
            finished += 1
            if progress is not None:
                progress(finished, workload.num_requests)
            return timing

        for _ in range(num_warmup):
            warm = completion_body(model, workload.prompt_token_ids[0], 4, workload.temperature)
            await send_request(client, url, warm, num_prompt_tokens=len(workload.prompt_token_ids[0]))

        start = clock()
        tasks = []
        for i, gap in enumerate(gaps):
            if gap > 0:
                await sleep(gap)
            tasks.append(asyncio.create_task(one(i)))
        timings = await asyncio.gather(*tasks)
        duration = clock() - start
    return compute_metrics(timings, duration, slo)


@click.command("serve")
@click.option("--base-url", required=True, help="Server root, e.g. http://127.0.0.1:8000")
@click.option("--model", required=True)
@click.option(
    "--request-rate", type=float, default=math.inf, show_default=True, help="Requests/s; inf = all at once."
)
@click.option("--scale", type=float, default=1.0, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--max-concurrency", type=int, default=None)
@click.option("--slo-ttft-ms", type=float, default=None)
@click.option("--slo-tpot-ms", type=float, default=None)
@click.option("--slo-e2e-ms", type=float, default=None)
@click.option("--api-key", envvar="OPENAI_API_KEY", default=None, help="Bearer token (env OPENAI_API_KEY).")
@click.option(
    "--label", default="server", show_default=True, help="Name of the system under test in the JSON."
)
@click.option(
    "--warmup-requests",
    type=int,
    default=1,
    show_default=True,
    help="Untimed requests sent to each server first.",
)
@click.option(
    "--peer",
    type=click.Choice(["none", "hf"]),
    default="none",
    show_default=True,
    help="Also run the workload through HF transformers (bench.serving.hf_server) in this run.",
)
@click.option(
    "--peer-model-dir",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    default=None,
    help="The transformers checkpoint of the model the server under test serves.",
)
@click.option("--peer-device", default="cpu", show_default=True)
@click.option("--peer-mode", type=click.Choice(MODES), default="cb", show_default=True)
@click.option(
    "--peer-arg",
    "peer_args",
    multiple=True,
    help="Extra bench.serving.hf_server option, repeatable: --peer-arg=--num-threads=1 --peer-arg=--num-blocks=64",
)
@click.option("--output", type=click.Path(path_type=Path), default=None)
def serve(
    base_url: str,
    model: str,
    request_rate: float,
    scale: float,
    seed: int,
    max_concurrency: int | None,
    slo_ttft_ms: float | None,
    slo_tpot_ms: float | None,
    slo_e2e_ms: float | None,
    api_key: str | None,
    label: str,
    warmup_requests: int,
    peer: str,
    peer_model_dir: Path | None,
    peer_device: str,
    peer_mode: str,
    peer_args: tuple[str, ...],
    output: Path | None,
) -> None:
    """Poisson-arrival streaming benchmark of an OpenAI-compatible /v1/completions endpoint."""
    workload = nano_vllm_workload().scaled(scale)
    has_slo = any(v is not None for v in (slo_ttft_ms, slo_tpot_ms, slo_e2e_ms))
    slo = SLO(ttft_ms=slo_ttft_ms, tpot_ms=slo_tpot_ms, e2e_ms=slo_e2e_ms) if has_slo else None
    spec = None
    if peer == "hf":
        if peer_model_dir is None:
            raise click.UsageError("--peer hf needs --peer-model-dir")
        spec = PeerSpec(
            model_dir=peer_model_dir,
            device=peer_device,
            mode=peer_mode,
            temperature=workload.temperature,
            extra_args=peer_args,
        )

    async def measure(url: str, served_model: str, key: str | None) -> ServeMetrics:
        with ProgressBar(f"requests to {served_model}") as bar:
            return await run_serve(
                base_url=url,
                model=served_model,
                workload=workload,
                request_rate=request_rate,
                seed=seed,
                max_concurrency=max_concurrency,
                slo=slo,
                api_key=key,
                num_warmup=warmup_requests,
                progress=bar,
            )

    async def measure_both() -> tuple[ServeMetrics, dict[str, Any] | None]:
        ours = await measure(base_url, model, api_key)
        if spec is None:
            return ours, None
        async with ServePeer.start(spec) as hf:
            peer_metrics = await measure(hf.base_url, hf.model, None)
        return ours, {
            "label": f"hf-transformers-{spec.mode}",
            "model_dir": str(spec.model_dir),
            "server": hf.info,
            "command": shlex.join(["python", *hf.argv[1:]]),
            "metrics": peer_metrics,
        }

    ours, peer_run = asyncio.run(measure_both())
    report: dict[str, Any] = {
        "benchmark": "serve",
        "label": label,
        "base_url": base_url,
        "model": model,
        "request_rate": request_rate if math.isfinite(request_rate) else "inf",
        "scale": scale,
        "seed": seed,
        "num_requests": workload.num_requests,
        "warmup_requests": warmup_requests,
        "slo": asdict(slo) if slo else None,
        "metrics": asdict(ours),
    }
    if peer_run is None:
        click.echo(format_metrics(ours))
    else:
        peer_metrics = peer_run.pop("metrics")
        ratios = compare(ours, peer_metrics)
        click.echo(format_comparison(label, ours, peer_run["label"], peer_metrics, ratios))
        report["peer"] = {**peer_run, "metrics": asdict(peer_metrics)}
        report["ratios"] = ratios
        for name, metrics in ((label, ours), (peer_run["label"], peer_metrics)):
            for error in metrics.errors[:3]:
                click.echo(f"{name} error: {error}", err=True)
    report.update(provenance(redacted(sys.argv), peer_device if spec else "cpu"))
    path = output or RESULTS_DIR / f"serve_{label}_{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    click.echo(f"wrote {path}")
    if ours.num_completed == 0:
        # A run that measured nothing is a failure, not a table of zeros (wrong URL, token, model).
        first = ours.errors[0] if ours.errors else "no error recorded"
        raise click.ClickException(
            f"no request completed against {base_url} ({ours.num_failed} failed; first: {first})"
        )


if __name__ == "__main__":
    serve()
