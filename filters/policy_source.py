"""Where the active ruleset comes from: the policy file and its keyword lists, reloaded on edit.

``current()`` compares the files' mtimes at most once per ``reload_interval_s`` (injectable
clock) and rebuilds the ruleset when one changed. A broken edit never takes effect: the
previous ruleset stays active, the failure is logged and counted. The first load raises, so
a gateway never starts without a valid policy.
"""

from __future__ import annotations

import importlib.resources
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from opentelemetry import metrics

from filters.config import FilterConfig
from filters.control_tokens import ControlTokenDetector
from filters.detector import Detector
from filters.detectors import KeywordDetector, builtin_detectors
from filters.detectors.keyword import read_terms
from filters.errors import PolicyError
from filters.policy import FilterPolicy, parse_policy
from filters.ruleset import Ruleset
from filters.scanner import Scanner

_log = logging.getLogger(__name__)


def packaged_policy_path() -> Path:
    return Path(str(importlib.resources.files("policies").joinpath("filters/default.toml")))


class PolicySource:
    def __init__(
        self,
        policy_path: Path,
        extra_keyword_files: tuple[Path, ...] = (),
        *,
        extra_detectors: Sequence[Detector] = (),
        reload_interval_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        self.policy_path = policy_path
        self._extra = extra_keyword_files
        self._extra_detectors = tuple(extra_detectors)
        self._interval = reload_interval_s
        self._clock = clock
        self._meter_provider = meter_provider
        self._reload_failures = metrics.get_meter(
            "strongroom.filters", meter_provider=meter_provider
        ).create_counter(
            "filter.policy.reload_failures",
            description="Policy edits rejected; the previous policy stays active",
        )
        self._stamps, self._ruleset = self._load()
        self._checked_at = clock()

    @classmethod
    def from_config(
        cls,
        config: FilterConfig,
        data_dir: str | Path,
        *,
        clock: Callable[[], float] = time.monotonic,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> PolicySource:
        base = Path(data_dir)
        path = packaged_policy_path() if config.policy_file is None else base / config.policy_file
        return cls(
            path,
            tuple(base / f for f in config.keyword_files),
            reload_interval_s=config.reload_interval_s,
            clock=clock,
            meter_provider=meter_provider,
        )

    def __repr__(self) -> str:
        return f"PolicySource(policy={self.policy_path.name!r})"

    def current(self) -> Ruleset:
        now = self._clock()
        if now - self._checked_at >= self._interval:
            self._checked_at = now
            if self._read_stamps(self._watched()) != self._stamps:
                self._try_reload()
        return self._ruleset

    def reload(self) -> Ruleset:
        """Reload now; raises PolicyError (and keeps the previous ruleset) if the edit is invalid."""
        self._stamps, self._ruleset = self._load()
        self._checked_at = self._clock()
        return self._ruleset

    def _try_reload(self) -> None:
        try:
            self.reload()
        except PolicyError as exc:
            self._reload_failures.add(1)
            _log.error("filter policy reload rejected, keeping the previous one: %s", exc)
            self._stamps = self._read_stamps(self._watched())

    def _load(self) -> tuple[tuple[tuple[int, int], ...], Ruleset]:
        try:
            data = self.policy_path.read_bytes()
        except OSError as exc:
            raise PolicyError(f"cannot read filter policy {self.policy_path}: {type(exc).__name__}") from exc
        policy = parse_policy(data, source=self.policy_path.name)
        watched = self._watched(policy)
        stamps = self._read_stamps(watched)
        detectors = self._detectors(policy)
        return stamps, Ruleset(
            policy,
            Scanner(detectors, meter_provider=self._meter_provider),
        )

    def _detectors(self, policy: FilterPolicy) -> list[Detector]:
        folder = self.policy_path.parent
        keyword_terms = [
            t for p in (*(folder / f for f in policy.keywords.files), *self._extra) for t in read_terms(p)
        ]
        phrases = [t for f in policy.injection.files for t in read_terms(folder / f)]
        return [
            *builtin_detectors(),
            KeywordDetector("keyword", keyword_terms, priority=10, max_gap=policy.keywords.max_gap),
            KeywordDetector("prompt_injection", phrases, priority=5, max_gap=policy.injection.max_gap),
            ControlTokenDetector(),
            *self._extra_detectors,
        ]

    def _watched(self, policy: FilterPolicy | None = None) -> tuple[Path, ...]:
        policy = policy or self._ruleset.policy
        folder = self.policy_path.parent
        lists = (*policy.keywords.files, *policy.injection.files)
        return (self.policy_path, *(folder / f for f in lists), *self._extra)

    @staticmethod
    def _read_stamps(paths: tuple[Path, ...]) -> tuple[tuple[int, int], ...]:
        stamps = []
        for path in paths:
            try:
                stat = path.stat()
                stamps.append((stat.st_mtime_ns, stat.st_size))
            except OSError:
                stamps.append((-1, -1))
        return tuple(stamps)
