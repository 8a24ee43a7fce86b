"""The content filter the gateway calls: requests, whole responses, and streams.

    pipeline = FilterPipeline.from_config(settings.filters, settings.data_dir)
    result = pipeline.check_request(texts, FilterContext(roles=principal.roles, model=model))
    if result.blocked: -> 400 content_policy_violation; forward result.texts otherwise
    sf = pipeline.stream(ctx); step = sf.feed(delta) ... sf.finish(); audit sf.findings

Every text is normalized, scanned by the detectors the policy turns on for this direction,
role and model, and rewritten on the original characters. Findings carry type, count, action
and direction only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from opentelemetry.metrics import MeterProvider

from filters.action import Action, Direction
from filters.config import FilterConfig
from filters.context import FilterContext, FilterResult, Hit
from filters.conversation import Conversation
from filters.finding_tally import FindingTally
from filters.normalized import normalize
from filters.policy_source import PolicySource
from filters.rewrite import FAILED_PLACEHOLDER
from filters.ruleset import Ruleset
from filters.stream_filter import StreamFilter


class FilterPipeline:
    def __init__(self, source: PolicySource) -> None:
        self._source = source
        normalize("é")  # builds the fold table (~1 s) at start-up, not on the first request

    @classmethod
    def from_config(
        cls,
        config: FilterConfig,
        data_dir: str | Path,
        *,
        clock: Callable[[], float] = time.monotonic,
        scan_clock: Callable[[], float] = time.perf_counter,
        meter_provider: MeterProvider | None = None,
    ) -> FilterPipeline:
        """Raises PolicyError when the policy or a keyword list cannot be loaded (fail closed).

        ``clock`` paces the policy file's mtime checks; ``scan_clock`` times detectors against
        the scan budget; ``meter_provider`` None means the global one."""
        source = PolicySource.from_config(
            config, data_dir, clock=clock, scan_clock=scan_clock, meter_provider=meter_provider
        )
        return cls(source)

    def __repr__(self) -> str:
        return f"FilterPipeline(source={self._source!r})"

    @property
    def ruleset(self) -> Ruleset:
        return self._source.current()

    def reload(self) -> None:
        """Re-read the policy now; raises PolicyError and keeps the old one if the edit is invalid."""
        self._source.reload()

    def check_request(self, texts: Sequence[str], ctx: FilterContext) -> FilterResult:
        """Scan every message content (and tool-call argument string) of one request, as one
        conversation: a value split across two texts is found (``Conversation``)."""
        return self._check(texts, ctx, Direction.REQUEST)

    def check_response(self, text: str, ctx: FilterContext) -> FilterResult:
        return self._check([text], ctx, Direction.RESPONSE)

    def stream(self, ctx: FilterContext) -> StreamFilter:
        ruleset = self.ruleset
        actions = ruleset.actions_for(Direction.RESPONSE, ctx)
        return StreamFilter(ruleset.scanner, actions, on_error=ruleset.policy.on_error)

    def hits(self, text: str, ctx: FilterContext, direction: Direction) -> tuple[list[Hit], bool]:
        """Every finding with original offsets, for policy owners trying a policy (CLI)."""
        ruleset = self.ruleset
        norm = normalize(text)
        outcome = ruleset.scanner.scan(norm.text, ruleset.actions_for(direction, ctx))
        if outcome.failed is not None:
            on_error = ruleset.policy.on_error.value
            return [
                Hit(type=f"detector_failed:{outcome.failed}", start=0, end=len(text), action=on_error)
            ], True
        hits = []
        for match in outcome.matches:
            start, end = norm.to_original(match.start, match.end)
            hits.append(Hit(type=match.detector, start=start, end=end, action=match.action.value))
        return hits, any(m.action is Action.BLOCK for m in outcome.matches)

    def _check(self, texts: Sequence[str], ctx: FilterContext, direction: Direction) -> FilterResult:
        ruleset = self.ruleset
        actions = ruleset.actions_for(direction, ctx)
        tally = FindingTally(direction)
        conversation = Conversation(texts)
        reach = ruleset.scanner.max_match_len(actions, rewriting_only=False)
        outcome = conversation.scan(lambda text: ruleset.scanner.scan(text, actions), reach)
        if outcome.failed is not None:
            tally.add(f"detector_failed:{outcome.failed}", ruleset.policy.on_error)
            out = [FAILED_PLACEHOLDER] * len(conversation.texts)
        else:
            for match in outcome.matches:
                tally.add(match.detector, match.action)
            out = conversation.rewrite(outcome.matches)
        return FilterResult(blocked=tally.is_blocking, texts=out, findings=tally.findings())
