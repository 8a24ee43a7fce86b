"""Filter work in bounded steps, bounded by characters, never by the clock (issue 18, item 1)."""

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from filter_fixtures import make_pipeline, write_policy

from filters import (
    Direction,
    FilterConfig,
    FilterContext,
    FilterPipeline,
    FilterResult,
    ScanBudgetError,
    normalize,
)
from filters.detector import Span
from filters.pipeline import LONG_SCANS_AT_ONCE
from filters.policy_source import PolicySource, packaged_policy_path
from filters.rewrite import rewrite
from filters.windowed_scan import PIECE_CHARS, SEGMENT_CHARS

CTX = FilterContext(roles=("user",), model="m")


class Recording:
    """Flags nothing; remembers how long each text it was handed was."""

    name = "recording"
    max_match_len = 8
    priority = 1

    def __init__(self) -> None:
        self.lengths: list[int] = []

    def scan(self, text: str) -> list[Span]:
        self.lengths.append(len(text))
        return []


class Slow:
    """A detector on a busy machine: correct, but 80 ms late."""

    name = "slow"
    max_match_len = 8
    priority = 1

    def scan(self, text: str) -> list[Span]:
        time.sleep(0.08)
        return []


def _whole_text(pipeline: FilterPipeline, text: str) -> tuple[str, list[tuple[str, str]]]:
    """The reference: one scan over the whole normalized text."""
    ruleset = pipeline.ruleset
    norm = normalize(text)
    outcome = ruleset.scanner.scan(norm.text, ruleset.actions_for(Direction.REQUEST, CTX))
    return rewrite(norm, outcome.matches), sorted((m.detector, m.action.value) for m in outcome.matches)


def test_a_long_text_scanned_in_windows_equals_one_whole_scan() -> None:
    pipeline = FilterPipeline.from_config(FilterConfig(), ".")
    values = ["6222 0212\u200b3456 7890 128", "zhang.san@example.com", "AKIAIOSFODNN7EXAMPLE", "13812345678"]
    parts: list[str] = []
    for i in range(250):
        # Values land on, before and after segment edges as the filler shifts them along; "ﬁ"
        # and the zero-width space make normalized offsets differ from the original ones.
        parts.append("账户 ＡＢＣ ﬁller text " * (i % 7 + 3))
        parts.append(values[i % len(values)])
    text = " ".join(parts)
    assert len(text) > PIECE_CHARS and len(normalize(text).text) > 8 * SEGMENT_CHARS
    expected_text, expected = _whole_text(pipeline, text)
    result = pipeline.check_request([text], CTX)
    assert result.texts == [expected_text]
    counts: dict[str, int] = {}
    for detector, _ in expected:
        counts[detector] = counts.get(detector, 0) + 1
    assert {f.type: f.count for f in result.findings} == counts


def test_every_step_hands_detectors_a_bounded_window(tmp_path: Path) -> None:
    recording = Recording()
    pipeline = make_pipeline(write_policy(tmp_path), extra_detectors=[recording])
    pipeline.check_request(["1234 5678 " * 20_000], CTX)
    reach = pipeline.ruleset.scanner.max_match_len(
        pipeline.ruleset.actions_for(Direction.REQUEST, CTX), rewriting_only=False
    )
    assert max(recording.lengths) <= SEGMENT_CHARS + 2 * reach
    assert sum(recording.lengths) < 2 * 200_000


def _turns_of_another_client(check: Callable[[], Awaitable[FilterResult]]) -> tuple[int, FilterResult]:
    """How often another task ran while ``check`` was running, and its result."""

    async def main() -> tuple[int, FilterResult]:
        ticks = 0
        done = asyncio.Event()

        async def other_client() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(other_client())
        await asyncio.sleep(0)
        result = await check()
        done.set()
        await task
        return ticks, result

    return asyncio.run(main())


def test_the_async_check_yields_to_the_event_loop_between_steps(tmp_path: Path) -> None:
    pipeline = make_pipeline(write_policy(tmp_path))
    text = "1234 5678 " * 5_000
    ticks, result = _turns_of_another_client(lambda: pipeline.acheck_request([text], CTX))
    assert result.texts == pipeline.check_request([text], CTX).texts
    assert ticks >= len(text) // SEGMENT_CHARS


def test_a_slow_detector_on_a_busy_machine_is_not_a_failure(tmp_path: Path) -> None:
    source = PolicySource(packaged_policy_path(), extra_detectors=[Slow()])
    result = FilterPipeline(source).check_request(["hello, nothing sensitive here"], CTX)
    assert not result.blocked
    assert result.findings == ()


def test_a_request_over_the_budget_is_refused_before_any_work(tmp_path: Path) -> None:
    recording = Recording()
    pipeline = make_pipeline(write_policy(tmp_path), extra_detectors=[recording], max_scan_chars=1000)
    assert not pipeline.check_request(["a" * 600, "b" * 400], CTX).blocked
    recording.lengths.clear()
    with pytest.raises(ScanBudgetError) as raised:
        pipeline.check_request(["a" * 600, "b" * 401], CTX)
    assert raised.value.status_code == 413 and "1000" in str(raised.value)
    assert recording.lengths == []


def test_what_normalization_adds_counts_against_the_budget(tmp_path: Path) -> None:
    pipeline = make_pipeline(write_policy(tmp_path), max_scan_chars=5000)
    assert len(normalize("\ufdfa").text) == 18
    with pytest.raises(ScanBudgetError):
        pipeline.check_request(["\ufdfa" * 1000], CTX)


def test_a_response_over_the_budget_fails_closed(tmp_path: Path) -> None:
    pipeline = make_pipeline(write_policy(tmp_path), max_scan_chars=100)
    result = pipeline.check_response("x" * 101, CTX)
    assert result.blocked
    assert result.texts == ["[REDACTED:FILTER_ERROR]"]
    assert [(f.type, f.action) for f in result.findings] == [("scan_budget_exceeded", "block")]


def test_a_long_stream_delta_is_scanned_in_bounded_steps(tmp_path: Path) -> None:
    recording = Recording()
    pipeline = make_pipeline(write_policy(tmp_path), extra_detectors=[recording])
    sf = pipeline.stream(CTX)
    delta = "plain words " * 20_000
    released = sf.feed(delta).release + sf.finish().release
    assert released == delta
    assert max(recording.lengths) <= 3 * SEGMENT_CHARS


def test_a_flood_of_long_texts_advances_two_steps_per_loop_turn(tmp_path: Path) -> None:
    recording = Recording()
    pipeline = make_pipeline(write_policy(tmp_path), extra_detectors=[recording])
    texts = ["plain words " * 2_000 for _ in range(8)]

    async def main() -> list[int]:
        per_turn: list[int] = []
        done = asyncio.Event()

        async def other_client() -> None:
            seen = len(recording.lengths)
            while not done.is_set():
                await asyncio.sleep(0)
                per_turn.append(len(recording.lengths) - seen)
                seen = len(recording.lengths)

        probe = asyncio.create_task(other_client())
        await asyncio.sleep(0)
        await asyncio.gather(*(pipeline.acheck_request([t], CTX) for t in texts))
        done.set()
        await probe
        return per_turn

    per_turn = asyncio.run(main())
    assert len(recording.lengths) > 10 * len(texts)
    # Each scan's first step may come at once; after that only LONG_SCANS_AT_ONCE scans move,
    # so the other client waits for at most that many steps between two turns of its own.
    first = next(i for i, n in enumerate(per_turn) if n)
    assert max(per_turn[first + 1 :]) <= LONG_SCANS_AT_ONCE, per_turn


def test_many_short_texts_yield_to_the_event_loop_too(tmp_path: Path) -> None:
    pipeline = make_pipeline(write_policy(tmp_path))
    texts = ["1234 5678 " * 50] * 400  # 400 messages of 500 characters: each one window
    ticks, _ = _turns_of_another_client(lambda: pipeline.acheck_request(texts, CTX))
    assert ticks >= sum(map(len, texts)) // (SEGMENT_CHARS + 500)
