"""Serving metrics on /metrics under vLLM's names, so dashboards and alerts built for vLLM work.

Two sources:

- the gateway's own request path: time to first token, time per output token, inter-token
  latency and end-to-end latency per model — histograms observed as requests run;
- the engines' scheduler and KV-pool counters, read from the engine pool's last refresh at scrape
  time (``EngineStatsCollector``): running and waiting sequences per model, KV-cache usage,
  preemptions and prefix-cache hits per engine instance.

The names and labels follow vLLM (``vllm:num_requests_running{model_name=...}``); series vLLM
has no name for are ``strongroom:*``. They live in a registry of their own, rendered after the
OpenTelemetry exporter's, so a second Telemetry (tests) never registers a name twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.stage_timer import StageTimer

__all__ = ["EngineStatsCollector", "ServingMetrics"]

# Bucket edges as vLLM uses them (seconds), so histograms line up across the two.
_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
_TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
_E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)

EngineStats = Callable[[], Iterable[tuple[str, Mapping[str, float]]]]
"""(engine instance id, that engine's last stats) for every engine in service."""


class EngineStatsCollector(Collector):
    """Turns the engines' stats mappings into vLLM-named series at scrape time."""

    def __init__(self, source: EngineStats) -> None:
        self._source = source

    def collect(self) -> Iterable[Metric]:
        running = GaugeMetricFamily(
            "vllm:num_requests_running", "Sequences in the running batch", labels=["model_name", "engine"]
        )
        waiting = GaugeMetricFamily(
            "vllm:num_requests_waiting", "Sequences waiting to be scheduled", labels=["model_name", "engine"]
        )
        usage = GaugeMetricFamily(
            "vllm:kv_cache_usage_perc", "Share of the KV pool's blocks in use (1 = full)", labels=["engine"]
        )
        preemptions = CounterMetricFamily(
            "vllm:num_preemptions", "Sequences preempted to free KV blocks", labels=["engine"]
        )
        hits = CounterMetricFamily(
            "vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache", labels=["engine"]
        )
        queries = CounterMetricFamily(
            "vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache", labels=["engine"]
        )
        for engine, stats in self._source():
            for key, value in stats.items():
                kind, _, model = key.partition(":")
                if model and kind == "running":
                    running.add_metric([model, engine], value)
                elif model and kind == "waiting":
                    waiting.add_metric([model, engine], value)
            total = stats.get("blocks_total", 0.0)
            if total:
                usage.add_metric([engine], 1.0 - stats.get("blocks_free", total) / total)
            if "preemptions" in stats:
                preemptions.add_metric([engine], stats["preemptions"])
            if "prefix_cache_query_tokens" in stats:
                hits.add_metric([engine], stats.get("prefix_cache_hit_tokens", 0.0))
                queries.add_metric([engine], stats["prefix_cache_query_tokens"])
        return [running, waiting, usage, preemptions, hits, queries]


class ServingMetrics:
    """The request-path histograms, and the engine collector once the pool exists."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ["model_name"]
        self.time_to_first_token = Histogram(
            "vllm:time_to_first_token_seconds",
            "From the request's arrival at the gateway to its first token leaving",
            labels,
            buckets=_TTFT_BUCKETS,
            registry=self.registry,
        )
        self.time_per_output_token = Histogram(
            "vllm:time_per_output_token_seconds",
            "A finished request's mean time per output token after the first",
            labels,
            buckets=_TPOT_BUCKETS,
            registry=self.registry,
        )
        self.inter_token_latency = Histogram(
            "vllm:inter_token_latency_seconds",
            "Time between two streamed deltas, per token they carry",
            labels,
            buckets=_TPOT_BUCKETS,
            registry=self.registry,
        )
        self.e2e_request_latency = Histogram(
            "vllm:e2e_request_latency_seconds",
            "From arrival to the last byte of the answer",
            labels,
            buckets=_E2E_BUCKETS,
            registry=self.registry,
        )
        self.stages = StageTimer(self.registry)
        """Per-stage latencies of the request path (``strongroom:gateway_stage_seconds``)."""
        self._engines: EngineStatsCollector | None = None

    def watch_engines(self, source: EngineStats) -> None:
        """Expose the engines' stats (called once the engine pool exists; a later call replaces it)."""
        if self._engines is not None:
            self.registry.unregister(self._engines)
        self._engines = EngineStatsCollector(source)
        self.registry.register(self._engines)

    def finished(self, model: str, *, e2e_s: float, ttft_s: float | None, num_output_tokens: int) -> None:
        """One request done: its end-to-end latency, and its TPOT when it produced two tokens or more."""
        self.e2e_request_latency.labels(model).observe(e2e_s)
        if ttft_s is not None and num_output_tokens > 1:
            self.time_per_output_token.labels(model).observe((e2e_s - ttft_s) / (num_output_tokens - 1))
