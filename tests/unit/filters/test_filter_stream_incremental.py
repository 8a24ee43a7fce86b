"""The incremental stream filter: any split of a text gives the whole text's result, each detector
holds back only what could still become its match, and a delta costs about its own length."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from filter_fixtures import ALL_REDACT, make_pipeline, write_policy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.filters.evasion import benign, evasions, look_alikes
from filters import Direction, FilterConfig, FilterContext, FilterPipeline
from filters.detectors import builtin_detectors
from filters.detectors.digit_run import run_rule
from filters.detectors.term_automaton import TermAutomaton
from filters.holdback import RunRule

CTX = FilterContext(roles=("user",), model="m")

# Values of every detector, their parts, separators, look-alikes, and what breaks a match.
PIECES = [
    "4111 1111 1111 1111", "6222021234567890128", "4539 – 1488\u034f0343.6467", "11010519491231002X",
    "91350100M000100Y43", "+86 138-1234-5678", "138.1234.5678", "DE89 3704 0044 0532 0130 00", "GB82",
    "078-05-1120", "zhang.san@example.com", "a@b.co", " at ", " dot ", "[at]", "(dot)", "(415) 555-2671",
    "ext 12", "+1 ", "192.168.10.254", "AKIAIOSFODNN7EXAMPLE", "\u0410KIA", 'api_key = "a8f9Kq2LmZ7xP0vB3nW5"',
    "password: hunter22", "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n", "-----END RSA PRIVATE KEY-----",
    "洗 钱", "insider", " trading", "\u0456nsider", "ignore previous instructions", "<|im_end|>", "[INST]",
    " ", "  ", "\n", "-", ".", "x", "1", "23", "卡号", "hello", "\u200b", "ﬁ", "١٢٣", "e\u0301", "sk-",
    "=", ":",
]  # fmt: skip
TEXTS = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=4)), max_size=12).map("".join)
SIZES = st.lists(st.integers(1, 9), min_size=1, max_size=40)
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def redacting(tmp_path_factory: pytest.TempPathFactory) -> FilterPipeline:
    return make_pipeline(write_policy(tmp_path_factory.mktemp("redact")))


@pytest.fixture(scope="module")
def blocking(tmp_path_factory: pytest.TempPathFactory) -> FilterPipeline:
    body = ALL_REDACT.replace('default_action = "redact"', 'default_action = "block"')
    return make_pipeline(write_policy(tmp_path_factory.mktemp("block"), body))


@pytest.fixture(scope="module")
def packaged(tmp_path_factory: pytest.TempPathFactory) -> FilterPipeline:
    """The packaged policy: mask, redact, block and flag-only detectors side by side."""
    return FilterPipeline.from_config(FilterConfig(), tmp_path_factory.mktemp("packaged"))


def split(text: str, sizes: list[int]) -> list[str]:
    chunks, pos, i = [], 0, 0
    while pos < len(text):
        chunks.append(text[pos : pos + sizes[i % len(sizes)]])
        pos += sizes[i % len(sizes)]
        i += 1
    return chunks


def stream(pipeline: FilterPipeline, chunks: list[str]) -> tuple[str, bool, tuple[object, ...]]:
    sf = pipeline.stream(CTX)
    released = []
    for chunk in chunks:
        step = sf.feed(chunk)
        released.append(step.release)
        if step.blocked:
            return "".join(released), True, sf.findings
    step = sf.finish()
    released.append(step.release)
    return "".join(released), step.blocked, sf.findings


@PROPERTY
@given(text=TEXTS, sizes=SIZES)
def test_any_split_gives_the_whole_text_result(
    redacting: FilterPipeline, text: str, sizes: list[int]
) -> None:
    whole = redacting.check_response(text, CTX)
    assert stream(redacting, split(text, sizes)) == (whole.texts[0], whole.blocked, whole.findings)


@PROPERTY
@given(text=TEXTS, sizes=SIZES)
def test_any_split_under_the_packaged_policy(packaged: FilterPipeline, text: str, sizes: list[int]) -> None:
    whole = packaged.check_response(text, CTX)
    released, blocked, findings = stream(packaged, split(text, sizes))
    assert blocked == whole.blocked
    if not blocked:  # a blocked stream stops counting at the block; the whole text counts on
        assert (released, findings) == (whole.texts[0], whole.findings)


@PROPERTY
@given(text=TEXTS, sizes=SIZES)
def test_nothing_of_a_blocked_value_leaves_before_the_decision(
    blocking: FilterPipeline, text: str, sizes: list[int]
) -> None:
    hits, is_blocked = blocking.hits(text, CTX, Direction.RESPONSE)
    released, blocked, _ = stream(blocking, split(text, sizes))
    assert blocked == is_blocked
    if blocked:
        first = min(hit.start for hit in hits if hit.action == "block")
        assert text[:first].startswith(released)
    else:
        assert released == text


@pytest.mark.parametrize("corpus", [evasions, look_alikes, benign])
def test_the_evasion_corpus_streams_like_the_whole_text(redacting: FilterPipeline, corpus) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(7)
    for case in corpus(seed=0, num=60):
        for _, text in case.messages:
            whole = redacting.check_response(text, CTX)
            sizes = [rng.randint(1, 6) for _ in range(8)]
            assert stream(redacting, split(text, sizes)) == (whole.texts[0], whole.blocked, whole.findings)


# Splits the property tests above found against earlier versions of this filter, kept for good.
FOUND = [
    "password: hunter226222021234567890128=",  # the key's '=' counted late: the value leaked
    "4111 1111 1111 11114111 1111 1111 1111078-05-1120 4111 1111 1111 11114111 1111 1111 1111",
    "91350100M000100Y434111 1111 1111 1111",  # decided by the character after it
    "password: hunter22:ignore previous instructions",  # a flag-only match inside a secret
    'password: hunter226222021234567890128api_key = "a8f9Kq2LmZ7xP0vB3nW5"',  # one value, not two
]


@pytest.mark.parametrize("text", FOUND)
def test_splits_found_by_the_property_tests(
    redacting: FilterPipeline, blocking: FilterPipeline, packaged: FilterPipeline, text: str
) -> None:
    for pipeline in (redacting, blocking, packaged):
        whole = pipeline.check_response(text, CTX)
        released, blocked, findings = stream(pipeline, list(text))
        assert blocked == whole.blocked
        if not blocked:
            assert (released, findings) == (whole.texts[0], whole.findings)


def holds_while_streaming(pipeline: FilterPipeline, text: str, delta: int = 1) -> list[dict[str, int]]:
    sf = pipeline.stream(CTX)
    seen = []
    for i in range(0, len(text), delta):
        sf.feed(text[i : i + delta])
        seen.append(sf.holds())
    return seen


def test_clean_prose_waits_only_for_its_last_word(redacting: FilterPipeline) -> None:
    sf = redacting.stream(CTX)
    text = "The model explains how attention works, step by step, in plain words. "
    released = "".join(sf.feed(ch).release for ch in text)
    # The address detector keeps the last word ("words." could still become "words.example@…"),
    # everything before it is out; the old filter held back 285 characters.
    assert released == text[: text.index("words.")]
    assert sf.num_held == len("words. ")


@pytest.mark.parametrize(
    ("prefix", "detector", "held"),
    [
        ("card 4111 1111", "payment_card", "4111 1111"),
        ("card 4111 1111 ok", "payment_card", ""),
        ("id 110105 19491231 002x", "cn_resident_id", "110105 19491231 002x"),
        ("call +86 138", "cn_mobile", "+86 138"),
        ("host 10.0.", "ipv4", "10.0."),
        ("phone (415) 55", "phone", "(415) 55"),
        ("iban gb82 we", "iban", "gb82 we"),
        ("iban g", "iban", "g"),
        ("mail zhang [at] exa", "email", "zhang [at] exa"),
        ("mail zhang and", "email", "and"),
        ("say <|im_", "control_token", "<|im_"),
        ("key akia12", "secret", "akia12"),
        ("text ----", "secret", "----"),
        ("he said 洗", "keyword", "洗"),
        ("please ignore previous", "prompt_injection", "ignore previous"),
    ],
)
def test_each_detector_holds_back_what_could_still_be_its_match(
    redacting: FilterPipeline, prefix: str, detector: str, held: str
) -> None:
    holds = holds_while_streaming(redacting, prefix)[-1]
    assert holds[detector] == len(held)


def test_an_open_private_key_block_is_held_until_its_end_line(redacting: FilterPipeline) -> None:
    sf = redacting.stream(CTX)
    out = sf.feed("ok -----BEGIN RSA PRIVATE KEY-----\n" + "MIIEpAIBAAKCAQEA7\n" * 40).release
    assert out == "ok "
    out += sf.feed("-----END RSA PRIVATE KEY----- done").release + sf.finish().release
    assert out == "ok [REDACTED:SECRET] done"


@pytest.mark.parametrize(
    "text",
    [
        "1234 5678 " * 60,  # one long run of digit groups
        "x" * 600,  # one long word
        "insider trading " * 40,
        "a@b.co " * 80,
        "\u0456nsider " * 70,
        "-" * 400,
        "1." * 300,
    ],
)
def test_no_detector_holds_more_than_its_longest_match(redacting: FilterPipeline, text: str) -> None:
    limits = {d.name: d.max_match_len - 1 for d in redacting.ruleset.scanner.detectors}
    for holds in holds_while_streaming(redacting, text, delta=3):
        for name, held in holds.items():
            assert held <= limits[name], name


def mixed_answer(num_chars: int) -> str:
    """Prose, numbers and values packed far denser than a real answer: a value every ~20 chars."""
    rng = random.Random(0)
    parts = [
        "您好，我的银行卡号是6222 0212 3456 7890 128，手机13812345678。",
        "Please update my email to zhang.san@example.com and check 10.1.2.3 logs. ",
        "The wire to IBAN DE89 3704 0044 0532 0130 00 failed; my SSN is 078-05-1120. ",
        "Thanks a lot for your help, and sorry for the long message, the team is waiting. ",
        "token = a8f9Kq2LmZ7xP0vB3nW5 and 2024/01/15 at 10:30, order 5567 8812 3. ",
    ]
    text = ""
    while len(text) < num_chars:
        text += rng.choice(parts)
    return text


def scanned(pipeline: FilterPipeline, text: str, delta: int) -> tuple[int, int]:
    """(characters handed to detectors in all, the most in one step)"""
    sf = pipeline.stream(CTX)
    most = 0
    for i in range(0, len(text), delta):
        before = sf.num_scanned
        sf.feed(text[i : i + delta])
        most = max(most, sf.num_scanned - before)
        assert sf.num_held <= sf.hold_len
    sf.finish()
    return sf.num_scanned, most


def test_a_long_stream_costs_its_length_however_it_is_split(packaged: FilterPipeline) -> None:
    """The work is counted, not timed: characters handed to detectors over a 100,000-character
    answer. Cut into 4-character deltas it costs about what 1,024-character deltas cost, and
    about what one scan of the whole text by every detector reads (13 characters per character
    here); no step rescans a window. The windowed filter this replaces scanned its whole window
    (~570 characters) with every detector for every delta: ~1,850 characters per character at
    4-character deltas."""
    text = mixed_answer(100_000)
    num_detectors = len(packaged.ruleset.scanner.detectors)
    small, most = scanned(packaged, text, 4)
    large, _ = scanned(packaged, text, 1024)
    assert small <= 1.5 * large
    assert small <= 2 * num_detectors * len(text)
    assert most <= 2_000  # a few matches and their context, never a function of the stream


def test_clean_prose_is_not_scanned_at_all(packaged: FilterPipeline) -> None:
    text = "the model explains how attention works step by step in plain words " * 300
    total, _ = scanned(packaged, text, 4)
    assert total == 0


def test_a_value_split_over_many_deltas_is_found_once(redacting: FilterPipeline) -> None:
    text = "card 4111 1111 1111 1111 and mail a@b.co ok"
    released, blocked, findings = stream(redacting, list(text))
    assert released == "card [REDACTED:PAYMENT_CARD] and mail [REDACTED:EMAIL] ok"
    assert not blocked
    assert [(f.type, f.count) for f in findings] == [("email", 1), ("payment_card", 1)]  # type: ignore[attr-defined]


def test_wake_characters_cover_every_marker_and_trigger() -> None:
    """An idle detector skips its marker and trigger search on text without its wake
    characters, so no marker or trigger may occur in text without them."""
    rng = random.Random(1)
    candidates = "".join(map(chr, range(0x3000)))
    rules = [r for d in builtin_detectors() if isinstance(r := getattr(d, "stream_rule", None), RunRule)]
    rules += [run_rule(96), run_rule(30, extra="+", marker="[0-9+]"), run_rule(91, extra="x")]
    for rule in rules:
        if not rule.wake:
            continue
        members = [ch for ch in rule.members if ch not in rule.wake]
        texts = ["".join(ch for ch in candidates if ch not in rule.wake)]
        texts += ["".join(rng.choices(members, k=2000)) for _ in range(20)]
        for pattern in (rule.marker, rule.trigger):
            if pattern is not None:
                assert not any(pattern.search(text) for text in texts), pattern.pattern


def test_term_automaton_depth_is_the_longest_suffix_that_begins_a_term() -> None:
    terms = ["abcd", "bcx", "cd", "d"]
    automaton = TermAutomaton(terms)
    text = "xabcdbcxabcbcd"
    state = 0
    for i, ch in enumerate(text):
        state = automaton.step(state, ch)
        read = text[: i + 1]
        longest = max(
            k for k in range(len(read) + 1) if any(t.startswith(read[len(read) - k :]) for t in terms)
        )
        ending = [len(t) for t in terms if read.endswith(t)]
        assert automaton.depth[state] == longest, read
        assert automaton.shortest_out[state] == min(ending, default=0), read


def test_detector_failure_mid_stream_starts_over_cleanly(tmp_path: Path) -> None:
    class ExplodesOnce:
        name = "boom"
        max_match_len = 4
        priority = 1
        calls = 0

        def scan(self, text: str) -> list[tuple[int, int]]:
            if "9" in text and ExplodesOnce.calls == 0:
                ExplodesOnce.calls += 1
                raise RuntimeError("bug")
            return []

    body = ALL_REDACT.replace('on_error = "block"', 'on_error = "redact"')
    pipeline = make_pipeline(write_policy(tmp_path, body), extra_detectors=[ExplodesOnce()])
    sf = pipeline.stream(CTX)
    out = sf.feed("card 4111 9").release
    out += sf.feed(" then mail a@b.co done").release + sf.finish().release
    assert out == "[REDACTED:FILTER_ERROR] then mail [REDACTED:EMAIL] done"


def test_chinese_prose_is_released_as_it_arrives(packaged: FilterPipeline) -> None:
    """No spaces, so no last word to wait for: the old filter held 285 characters here."""
    sf = packaged.stream(CTX)
    text = "您好，我想咨询一下账户的问题。昨天在网上银行转账的时候系统提示风控拦截，客服让我等一等。"
    most = 0
    for ch in text:
        sf.feed(ch)
        most = max(most, sf.num_held)
    assert most <= 2
