"""Helpers shared by the filter tests: a policy folder on disk and a pipeline over it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from opentelemetry.metrics import MeterProvider

from filters import FilterPipeline
from filters.config import DEFAULT_MAX_SCAN_CHARS
from filters.detector import Detector
from filters.policy_source import PolicySource

ALL_REDACT = """
default_action = "redact"
on_error = "block"
[keywords]
files = ["kw.txt"]
[injection]
files = ["inj.txt"]
"""


def write_policy(folder: Path, body: str = ALL_REDACT) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kw.txt").write_text("洗钱\n地下钱庄\ninsider trading\n", encoding="utf-8")
    (folder / "inj.txt").write_text("ignore previous instructions\n忽略之前的指令\n", encoding="utf-8")
    path = folder / "policy.toml"
    path.write_text(body, encoding="utf-8")
    return path


def make_pipeline(
    policy: Path,
    *,
    extra_detectors: Sequence[Detector] = (),
    clock: Callable[[], float] | None = None,
    max_scan_chars: int = DEFAULT_MAX_SCAN_CHARS,
    meter_provider: MeterProvider | None = None,
) -> FilterPipeline:
    kwargs: dict[str, Callable[[], float]] = {}
    if clock is not None:
        kwargs["clock"] = clock
    source = PolicySource(
        policy,
        extra_detectors=extra_detectors,
        reload_interval_s=1.0,
        meter_provider=meter_provider,
        **kwargs,
    )
    return FilterPipeline(source, max_scan_chars=max_scan_chars)
