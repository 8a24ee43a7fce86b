"""The content filter the gateway calls: requests, whole responses, and streams.

    pipeline = FilterPipeline.from_config(settings.filters, settings.data_dir)
    result = await pipeline.acheck_request(texts, FilterContext(roles=principal.roles, model=model))
    if result.blocked: -> 400 content_policy_violation; forward result.texts otherwise
    sf = pipeline.stream(ctx); step = sf.feed(delta) ... sf.finish(); audit sf.findings

Every text is normalized, scanned by the detectors the policy turns on for this direction,
role and model, and rewritten on the original characters. Findings carry type, count, action
and direction only.

The ``a``-prefixed methods are for the event loop: they scan in bounded steps
(``filters.windowed_scan``) and yield to the loop between them, so other clients are served
while a long text is filtered. The plain methods run the same steps to the end (CLI, tests).
Work per request or response is capped by ``max_scan_chars`` (``filters.scan_budget``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Generator, Sequence
from pathlib import Path

from opentelemetry.metrics import MeterProvider

from filters.action import Action, Direction
from filters.config import DEFAULT_MAX_SCAN_CHARS, FilterConfig
from filters.context import FilterContext, FilterResult, Hit
from filters.conversation import SEPARATOR, Conversation
from filters.errors import ScanBudgetError
from filters.finding_tally import FindingTally
from filters.normalized import normalize
from filters.policy_source import PolicySource
from filters.rewrite import FAILED_PLACEHOLDER
from filters.ruleset import Ruleset
from filters.scan_budget import ScanBudget
from filters.stream_filter import StreamFilter
from filters.windowed_scan import normalize_in_steps

_CheckSteps = Generator[None, None, FilterResult]

LONG_SCANS_AT_ONCE = 2
"""Scans of more than one step that advance at a time; others wait without using the CPU, so
a flood of long bodies delays the event loop by at most this many steps per turn."""


class FilterPipeline:
    def __init__(self, source: PolicySource, *, max_scan_chars: int = DEFAULT_MAX_SCAN_CHARS) -> None:
        self._source = source
        self.max_scan_chars = max_scan_chars
        self._long_scans = asyncio.Semaphore(LONG_SCANS_AT_ONCE)
        normalize("é")  # builds the fold table (~1 s) at start-up, not on the first request

    @classmethod
    def from_config(
        cls,
        config: FilterConfig,
        data_dir: str | Path,
        *,
        clock: Callable[[], float] = time.monotonic,
        meter_provider: MeterProvider | None = None,
    ) -> FilterPipeline:
        """Raises PolicyError when the policy or a keyword list cannot be loaded (fail closed).

        ``clock`` paces the policy file's mtime checks; ``meter_provider`` None means the global one."""
        source = PolicySource.from_config(config, data_dir, clock=clock, meter_provider=meter_provider)
        return cls(source, max_scan_chars=config.max_scan_chars)

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
        conversation: a value split across two texts is found (``Conversation``).

        Raises ``ScanBudgetError`` (413) when they hold more than ``max_scan_chars``."""
        return _run(self._check(texts, ctx, Direction.REQUEST))

    def check_response(self, text: str, ctx: FilterContext) -> FilterResult:
        return _run(self._check([text], ctx, Direction.RESPONSE))

    async def acheck_request(self, texts: Sequence[str], ctx: FilterContext) -> FilterResult:
        """``check_request`` in bounded steps, yielding to the event loop between them."""
        return await _arun(self._check(texts, ctx, Direction.REQUEST), self._long_scans)

    async def acheck_response(self, text: str, ctx: FilterContext) -> FilterResult:
        return await _arun(self._check([text], ctx, Direction.RESPONSE), self._long_scans)

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

    def _check(self, texts: Sequence[str], ctx: FilterContext, direction: Direction) -> _CheckSteps:
        ruleset = self.ruleset
        actions = ruleset.actions_for(direction, ctx)
        tally = FindingTally(direction)
        budget = ScanBudget(self.max_scan_chars, free_chars=len(SEPARATOR) * max(0, len(texts) - 1))
        try:
            # Refused before any work when the texts alone are over the budget.
            if sum(len(t) for t in texts) > budget.max_chars:
                raise ScanBudgetError(budget.max_chars)
            norm = yield from normalize_in_steps(SEPARATOR.join(texts), budget)
            conversation = Conversation(texts, norm)
            reach = ruleset.scanner.max_match_len(actions, rewriting_only=False)
            outcome = yield from conversation.scan_steps(
                lambda text: ruleset.scanner.scan(text, actions), reach
            )
            if outcome.failed is not None:
                tally.add(f"detector_failed:{outcome.failed}", ruleset.policy.on_error)
                out = [FAILED_PLACEHOLDER] * len(conversation.texts)
            else:
                for match in outcome.matches:
                    tally.add(match.detector, match.action)
                out = conversation.rewrite(outcome.matches)
        except ScanBudgetError:
            if direction is Direction.REQUEST:
                raise
            # A response cannot be refused: it fails closed like a failed detector.
            tally.add("scan_budget_exceeded", ruleset.policy.on_error)
            out = [FAILED_PLACEHOLDER] * len(texts)
        return FilterResult(blocked=tally.is_blocking, texts=out, findings=tally.findings())


def _run(steps: _CheckSteps) -> FilterResult:
    while (result := _step(steps)) is None:
        pass
    return result


async def _arun(steps: _CheckSteps, long_scans: asyncio.Semaphore) -> FilterResult:
    if (result := _step(steps)) is not None:
        return result  # one step: the usual, short request never waits
    async with long_scans:
        while True:
            await asyncio.sleep(0)
            if (result := _step(steps)) is not None:
                return result


def _step(steps: _CheckSteps) -> FilterResult | None:
    """One bounded step; the result once there are no more."""
    try:
        next(steps)
    except StopIteration as done:
        result: FilterResult = done.value
        return result
    return None
