"""bench.serving.hf_server on a tiny random Qwen3 on loopback, driven by bench.serving.serve's client and CLI."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from bench.engine.random_model import build_random_qwen3
from bench.engine.workload import TEMPERATURE, Workload, nano_vllm_workload
from bench.serving.metrics import RequestTiming
from bench.serving.peer import PeerSpec, PeerStartError, ServePeer
from bench.serving.serve import completion_body, run_serve, send_request, serve

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[4]
# Small explicit cache: sizing it from free memory on CPU takes ~15 s.
SMALL_CACHE = ("--num-threads=1", "--num-blocks=32", "--max-batch-tokens=256", "--no-warmup")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_random_qwen3(tmp_path_factory.mktemp("hf") / "tiny-qwen3", shape="tiny", dtype="float32")


@pytest.fixture(scope="module")
def cb_server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The continuous batching server in a child process; yields its ready line plus base_url."""
    spec = PeerSpec(model_dir=model_dir, temperature=TEMPERATURE, extra_args=SMALL_CACHE)
    log = tmp_path_factory.mktemp("hf-log") / "stderr.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(spec.argv(), cwd=REPO, stdout=subprocess.PIPE, stderr=err)
    assert proc.stdout is not None
    try:
        line = proc.stdout.readline()
        if not line:
            proc.wait()
            pytest.fail(f"hf_server exited {proc.returncode}: {log.read_text()[-2000:]}")
        info = json.loads(line)
        yield {**info, "base_url": f"http://127.0.0.1:{info['port']}"}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stdout.close()


def _request(prompt: list[int], max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {**completion_body("tiny-qwen3", prompt, max_tokens, TEMPERATURE), **extra}


async def _timings(base_url: str, requests: list[tuple[list[int], int]]) -> list[RequestTiming]:
    async with httpx.AsyncClient(timeout=60) as client:
        url = f"{base_url}/v1/completions"
        return list(
            await asyncio.gather(
                *(
                    send_request(client, url, _request(prompt, n), num_prompt_tokens=len(prompt))
                    for prompt, n in requests
                )
            )
        )


def test_concurrent_streams_run_to_max_tokens(cb_server: dict[str, Any]) -> None:
    assert cb_server["mode"] == "cb" and cb_server["model"] == "tiny-qwen3"
    requests = [([1, 2, 3, 4, 5], 7), ([9] * 40, 1), ([10239, 0], 12), (list(range(100, 130)), 3)]
    timings = asyncio.run(_timings(cb_server["base_url"], requests))
    for timing, (prompt, max_tokens) in zip(timings, requests, strict=True):
        assert timing.success, timing.error
        # ignore_eos: every request runs to max_tokens; each token of this tokenizer decodes to text,
        # so there is one chunk per token and max_tokens - 1 gaps.
        assert timing.num_output_tokens == max_tokens
        assert timing.num_prompt_tokens == len(prompt)
        assert len(timing.itl_s) == max_tokens - 1
        assert 0 < timing.ttft_s <= timing.e2e_s
        assert timing.e2e_s == pytest.approx(timing.ttft_s + sum(timing.itl_s))


def test_stream_ends_with_finish_reason_usage_and_done(cb_server: dict[str, Any]) -> None:
    body = _request([5, 6, 7], 4)
    with httpx.stream("POST", f"{cb_server['base_url']}/v1/completions", json=body, timeout=60) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/event-stream"
        events = [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    texts = [c["choices"][0]["text"] for c in chunks if c["choices"] and c["choices"][0]["text"]]
    assert len(texts) == 4 and all(t.startswith("t") for t in texts)
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    # Not streamed: one JSON body with the same usage.
    plain = httpx.post(
        f"{cb_server['base_url']}/v1/completions", json={**body, "stream": False}, timeout=60
    ).json()
    assert plain["usage"]["completion_tokens"] == 4 and plain["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize(
    ("change", "status", "message"),
    [
        ({"prompt": [10240]}, 400, "prompt token ids must be in [0, 10240)"),
        ({"prompt": []}, 400, "prompt must be a non-empty string or list of token ids"),
        ({"max_tokens": 0}, 400, "max_tokens must be an integer >= 1"),
        ({"max_tokens": 5000}, 400, "exceeds the model's 4096 positions"),
        ({"temperature": 1.0}, 400, "this server samples at temperature 0.6"),
        ({"model": "other"}, 404, "this server serves 'tiny-qwen3'"),
    ],
)
def test_bad_requests_get_openai_errors(
    cb_server: dict[str, Any], change: dict[str, Any], status: int, message: str
) -> None:
    response = httpx.post(
        f"{cb_server['base_url']}/v1/completions", json={**_request([1, 2], 3), **change}, timeout=30
    )
    assert response.status_code == status
    error = response.json()["error"]
    assert message in error["message"] and error["code"] == status


def test_bench_client_reports_the_error_and_the_server_keeps_serving(cb_server: dict[str, Any]) -> None:
    base = cb_server["base_url"]
    assert httpx.post(f"{base}/v1/completions", content=b"{not json", timeout=30).status_code == 400
    assert httpx.get(f"{base}/v1/models", timeout=30).status_code == 404
    bad, good = asyncio.run(_timings(base, [([1, 99999], 3), ([1, 2], 3)]))
    assert not bad.success
    assert bad.error.startswith("HTTP 400: ") and "[0, 10240)" in bad.error
    assert good.success and good.num_output_tokens == 3


def test_cli_runs_the_workload_through_ours_and_the_hf_peer(
    cb_server: dict[str, Any], model_dir: Path, tmp_path: Path
) -> None:
    # "Ours" is the cb server here; the peer is a second HF server in generate mode, started by the command.
    out = tmp_path / "serve.json"
    args = [
        f"--base-url={cb_server['base_url']}",
        "--model=tiny-qwen3",
        "--scale=0.01",
        "--request-rate=20",
        "--label=cb-as-ours",
        "--api-key=sk-secret",
        "--peer=hf",
        f"--peer-model-dir={model_dir}",
        "--peer-mode=generate",
        "--peer-arg=--num-threads=1",
        f"--output={out}",
    ]
    result = CliRunner().invoke(serve, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "cb-as-ours" in result.output and "hf-transformers-generate" in result.output
    report = json.loads(out.read_text())
    workload = nano_vllm_workload().scaled(0.01)
    for metrics in (report["metrics"], report["peer"]["metrics"]):
        assert metrics["num_completed"] == workload.num_requests and metrics["num_failed"] == 0
        assert metrics["num_output_tokens"] == workload.num_output_tokens
        assert metrics["num_prompt_tokens"] == workload.num_prompt_tokens
        assert 0 < metrics["ttft"]["median_ms"] <= metrics["e2e"]["median_ms"]
    assert report["peer"]["server"]["mode"] == "generate"
    assert report["peer"]["server"]["transformers"]
    ratio = report["metrics"]["output_throughput"] / report["peer"]["metrics"]["output_throughput"]
    assert report["ratios"]["output_throughput"] == pytest.approx(ratio)
    e2e = report["peer"]["metrics"]["e2e"]["p99_ms"] / report["metrics"]["e2e"]["p99_ms"]
    assert report["ratios"]["e2e_p99_ms"] == pytest.approx(e2e)
    assert "sk-secret" not in out.read_text()


def test_peer_that_exits_before_ready_raises_with_its_stderr(model_dir: Path) -> None:
    spec = PeerSpec(model_dir=model_dir, extra_args=("--no-such-option",))

    async def start() -> None:
        async with ServePeer.start(spec):
            pass

    with pytest.raises(PeerStartError, match=r"(?s)exited \(code 2\).*no-such-option"):
        asyncio.run(start())


def test_peer_spec_needs_a_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"holds no config\.json"):
        PeerSpec(model_dir=tmp_path)


def test_run_serve_against_the_cb_server_counts_every_token(cb_server: dict[str, Any]) -> None:
    workload = Workload(prompt_token_ids=[[3] * 8, [4] * 20, [5] * 2], max_tokens=[6, 2, 9])
    metrics = asyncio.run(
        run_serve(
            base_url=cb_server["base_url"],
            model="tiny-qwen3",
            workload=workload,
            request_rate=50.0,
            num_warmup=1,
        )
    )
    assert metrics.num_completed == 3 and metrics.errors == []
    assert metrics.num_output_tokens == 17 and metrics.num_prompt_tokens == 30
    assert metrics.itl.mean_ms > 0 and metrics.tpot.mean_ms > 0
    assert metrics.ttft.p99_ms <= metrics.e2e.p99_ms
