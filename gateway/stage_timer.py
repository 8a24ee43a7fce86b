"""How long each stage of a request takes inside the gateway: one histogram, a series per stage.

    strongroom:gateway_stage_seconds{stage="...", model_name="..."}

Stages (``STAGES``): ``auth`` (token verification, revocation included), ``policy`` (the
authorization decision, a policy reload it waited for included), ``request_filter`` and
``response_filter`` (the content filters; for a stream, the filter time summed over its deltas),
``quota`` (the reservation), ``audit`` (one record made
durable; every request writes one or more), ``engine_first_token`` (from the engine call to its
first frame) and ``engine_total`` (to the engine call's end). ``auth`` runs before the body names a
model, so its ``model_name`` is empty.

The cost per observation is a clock read and one ``Histogram.observe`` on a label child bound
once per (stage, model): no label lookup on the request path. Model names come from requests; the
number of distinct ones the timer binds is capped (``MAX_MODELS``), further names count under
``model_name="other"``, so a client sending random names cannot grow /metrics without bound.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from time import perf_counter_ns
from typing import Any, Literal, TypeVar, get_args

from prometheus_client import CollectorRegistry, Histogram

__all__ = ["STAGES", "Stage", "StageTimer"]

Stage = Literal[
    "auth",
    "policy",
    "request_filter",
    "response_filter",
    "quota",
    "audit",
    "engine_first_token",
    "engine_total",
]
STAGES: tuple[Stage, ...] = get_args(Stage)

_Frame = TypeVar("_Frame")

MAX_MODELS = 64
OTHER_MODEL = "other"

# From tens of microseconds (a decision from the table) to a minute (a long generation).
_BUCKETS = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)

now_ns = perf_counter_ns
"""The clock stage times are read on: take ``now_ns()`` at a stage's start, pass it to ``done``."""


class StageTimer:
    def __init__(self, registry: CollectorRegistry) -> None:
        self._histogram = Histogram(
            "strongroom:gateway_stage_seconds",
            "Time spent in each gateway stage of a request",
            ["stage", "model_name"],
            buckets=_BUCKETS,
            registry=registry,
        )
        self._children: dict[tuple[str, str], Any] = {}
        self._models: set[str] = set()
        for stage in STAGES:
            self._bind(stage, "")

    def __repr__(self) -> str:
        return f"StageTimer(num_series={len(self._children)})"

    def done(self, stage: Stage, model: str, started_ns: int) -> None:
        """``stage`` of a request for ``model`` ran from ``started_ns`` (``now_ns()``) until now."""
        self.observe(stage, model, (perf_counter_ns() - started_ns) * 1e-9)

    def observe(self, stage: Stage, model: str, seconds: float) -> None:
        child = self._children.get((stage, model))
        if child is None:
            child = self._bind(stage, model)
        child.observe(seconds)

    async def timed_frames(
        self, frames: AsyncIterable[_Frame], model: str, started_ns: int
    ) -> AsyncIterator[_Frame]:
        """``frames`` as they come, observing ``engine_first_token`` at the first and
        ``engine_total`` at the end (``started_ns``: just before the engine call was made)."""
        is_first = True
        async for frame in frames:
            if is_first:
                is_first = False
                self.done("engine_first_token", model, started_ns)
            yield frame
        self.done("engine_total", model, started_ns)

    def _bind(self, stage: str, model: str) -> Any:
        if model and model not in self._models:
            if len(self._models) >= MAX_MODELS:
                model = OTHER_MODEL
            self._models.add(model)
        key = (stage, model)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._histogram.labels(stage, model)
        return child
