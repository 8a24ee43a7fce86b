"""Leaving idle cursors unread changes nothing: delta by delta, the stream filter releases what
the filter whose every cursor reads every delta (``bench.filters.eager_stream_filter``) releases,
blocks where it blocks and counts what it counts; and both give the whole text's result."""

from __future__ import annotations

import random

import pytest
from filter_fixtures import ALL_REDACT, make_pipeline, write_policy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_filter_stream_incremental import PIECES, split

from bench.filters.eager_stream_filter import EagerStreamFilter
from filters import Direction, FilterConfig, FilterContext, FilterPipeline, StreamFilter
from filters.detectors import builtin_detectors
from filters.holdback import RunRule

CTX = FilterContext(roles=("user",), model="m")
WORDS = ["the", "model", "explains", "how", "attention", "works", "and", "at", "a", "asia", "sk", "github"]
TEXTS = st.lists(
    st.one_of(st.sampled_from(PIECES), st.sampled_from(WORDS), st.text(max_size=4)), max_size=24
).map(" ".join)
SIZES = st.lists(st.integers(1, 9), min_size=1, max_size=40)
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def redacting(tmp_path_factory: pytest.TempPathFactory) -> FilterPipeline:
    return make_pipeline(write_policy(tmp_path_factory.mktemp("redact")))


@pytest.fixture(scope="module")
def packaged(tmp_path_factory: pytest.TempPathFactory) -> FilterPipeline:
    return FilterPipeline.from_config(FilterConfig(), tmp_path_factory.mktemp("packaged"))


@pytest.fixture(scope="module")
def flagging(tmp_path_factory: pytest.TempPathFactory) -> FilterPipeline:
    """Short rewriting detectors beside long flag-only ones: the hold-back cap binds."""
    body = ALL_REDACT + '[actions]\nemail = "flag"\nsecret = "flag"\nkeyword = "flag"\n'
    return make_pipeline(write_policy(tmp_path_factory.mktemp("flag"), body))


def eager(pipeline: FilterPipeline) -> EagerStreamFilter:
    ruleset = pipeline.ruleset
    actions = ruleset.actions_for(Direction.RESPONSE, CTX)
    return EagerStreamFilter(ruleset.scanner, actions, on_error=ruleset.policy.on_error)


def steps(sf: StreamFilter | EagerStreamFilter, chunks: list[str]) -> list[tuple[str, bool]]:
    out = [(step.release, step.blocked) for step in map(sf.feed, chunks)]
    step = sf.finish()
    return [*out, (step.release, step.blocked)]


def assert_same_steps(
    pipeline: FilterPipeline, text: str, chunks: list[str], *, as_whole: bool = True
) -> None:
    """``as_whole`` False: a flag-only match longer than the hold-back (a flagged private-key
    block around a card) is settled too late to spare what it covers, in both filters."""
    ours, peer = pipeline.stream(CTX), eager(pipeline)
    ours_steps = steps(ours, chunks)
    assert ours_steps == steps(peer, chunks)
    assert ours.findings == peer.findings
    whole = pipeline.check_response(text, CTX)
    if as_whole and not whole.blocked:
        assert "".join(release for release, _ in ours_steps) == whole.texts[0]


@PROPERTY
@given(text=TEXTS, sizes=SIZES)
def test_every_delta_releases_what_the_eager_filter_releases(
    redacting: FilterPipeline, packaged: FilterPipeline, flagging: FilterPipeline, text: str, sizes: list[int]
) -> None:
    chunks = split(text, sizes)
    assert_same_steps(redacting, text, chunks)
    assert_same_steps(packaged, text, chunks)
    assert_same_steps(flagging, text, chunks, as_whole=False)


def answer(rng: random.Random, num_chars: int) -> str:
    """English prose with a value now and then, as a model answers."""
    prose = "The model explains how attention works, step by step, in plain words: "
    values = ["4111 1111 1111 1111", "zhang.san@example.com", "DE89 3704 0044 0532 0130 00", "10.1.2.3"]
    values += ['api_key = "a8f9Kq2LmZ7xP0vB3nW5"', "ignore previous instructions", "-----BEGIN", "asia"]
    text = ""
    while len(text) < num_chars:
        text += prose if rng.random() < 0.8 else rng.choice(values) + " "
    return text


@pytest.mark.parametrize("delta", [1, 3, 4, 7])
def test_a_long_answer_streams_like_the_eager_filter(packaged: FilterPipeline, delta: int) -> None:
    """Long enough to cut the buffer a few times (idle cursors catch up first)."""
    text = answer(random.Random(delta), 12_000)
    assert_same_steps(packaged, text, split(text, [delta]))


def test_holds_reads_what_idle_cursors_left_unread(redacting: FilterPipeline) -> None:
    sf = redacting.stream(CTX)
    sf.feed("iban g")
    assert sf.holds()["iban"] == 1
    sf.feed("b82 wes")
    assert sf.holds()["iban"] == len("gb82 wes")
    assert sf.holds()["payment_card"] == 0


def test_a_stream_starts_with_its_idle_detectors_unread(packaged: FilterPipeline) -> None:
    """A holdback idle before it has read anything starts idle: the first delta of clean prose
    is read by the detectors that may match any word (e-mail, keyword lists) and no other,
    and the stream still ends as the eager filter ends it."""
    sf = packaged.stream(CTX)
    sf.feed(" hello")
    read = sorted(c.detector.name for c in sf._cursors if c.read_to)
    assert read == ["email", "keyword", "prompt_injection"]
    assert steps(sf, [" world"]) == steps(eager(packaged), [" hello", " world"])[1:]


def test_idle_cursors_catch_up_before_the_buffer_is_cut(packaged: FilterPipeline) -> None:
    """The buffer stays bounded though the digit detectors never read a word of it."""
    sf = packaged.stream(CTX)
    for _ in range(3000):
        sf.feed("words ")
    assert len(sf._text) < 2 * 4096
    assert sf.feed("4111 1111 1111 1111 ").release.startswith("words ")
    assert sf.finish().release == "4111 **** **** 1111 "  # masked, as the packaged policy says


def test_an_idle_cut_off_marker_lies_where_quiet_says() -> None:
    """``Quiet.outside`` and ``keep`` bound the hold point of an idle run rule: a cut-off marker
    at the end is made of ``partial_chars`` only and is shorter than a marker."""
    rng = random.Random(2)
    rules = [r for d in builtin_detectors() if isinstance(r := getattr(d, "stream_rule", None), RunRule)]
    for rule in (r for r in rules if r.partial is not None and r.wake):
        allowed = set(rule.partial_chars or rule.members)
        members = [ch for ch in rule.members if ch not in rule.wake]
        for _ in range(3000):
            tail = "".join(rng.choices(members, k=rng.randint(1, 12)))
            cut = rule.partial.search(tail, max(0, len(tail) - rule.marker_len + 1))
            if cut is not None:
                assert set(cut.group()) <= allowed, (rule.marker.pattern, cut.group())
                assert len(cut.group()) <= rule.marker_len - 1
