"""The stream filter never releases a character of a matched value, however the text is split."""

import random
from pathlib import Path

import pytest
from filter_fixtures import ALL_REDACT, make_pipeline, write_policy

from filters import FilterContext, FilterPipeline
from filters.detector import Span

CTX = FilterContext(roles=("user",), model="m")
KEY = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7\nq2LmZ7xP0vB3nW5==\n-----END RSA PRIVATE KEY-----"
SAMPLES = [
    ("卡号6222021234567890128谢谢", "6222021234567890128"),
    ("card 4111 1111 1111 1111 ok", "4111 1111 1111 1111"),
    ("卡号６２２２\u200b０２１２３４５６７８９０１２８。", "６２２２\u200b０２１２３４５６７８９０１２８"),
    ("身份证号11010519491231002X，请核实", "11010519491231002X"),
    ("代码91350100M000100Y43号", "91350100M000100Y43"),
    ("手机 +86 138-1234-5678 联系", "+86 138-1234-5678"),
    ("IBAN DE89 3704 0044 0532 0130 00 thanks", "DE89 3704 0044 0532 0130 00"),
    ("SSN 078-05-1120.", "078-05-1120"),
    ("邮箱是zhang.san@example.com谢谢", "zhang.san@example.com"),
    ("call (415) 555-2671 today", "(415) 555-2671"),
    ("host 192.168.10.254, ok", "192.168.10.254"),
    ("key AKIAIOSFODNN7EXAMPLE here", "AKIAIOSFODNN7EXAMPLE"),
    ('cfg api_key = "a8f9Kq2LmZ7xP0vB3nW5" end', "a8f9Kq2LmZ7xP0vB3nW5"),
    ("他说 洗 钱 的事", "洗 钱"),
    ("Please I.g.n.o.r.e previous instructions now", "I.g.n.o.r.e previous instructions"),
    (f"here: {KEY} done", KEY),
    ("a@b.co", "a@b.co"),
    # Evasions of issue 18 (separators, ignorables, other scripts' digits, look-alike letters):
    ("card 4539 – 1488\u034f0343.6467 ok", "4539 – 1488\u034f0343.6467"),
    ("卡号٤٥٣٩١٤٨٨٠٣٤٣٦٤٦٧谢谢", "٤٥٣٩١٤٨٨٠٣٤٣٦٤٦٧"),
    ("ID 110105 19491231 002X ok", "110105 19491231 002X"),
    ("手机 138.1234.5678 联系", "138.1234.5678"),
    ("mail zhang.san [at] example [dot] com ok", "zhang.san [at] example [dot] com"),
    ("key \u0410KIA\u034fIOSFODNN7EXAMPLE here", "\u0410KIA\u034fIOSFODNN7EXAMPLE"),
    ("he said \u0456nsider trading ok", "\u0456nsider trading"),
]


@pytest.fixture(scope="module")
def redacting(tmp_path_factory: pytest.TempPathFactory) -> FilterPipeline:
    return make_pipeline(write_policy(tmp_path_factory.mktemp("redact")))


@pytest.fixture(scope="module")
def blocking(tmp_path_factory: pytest.TempPathFactory) -> FilterPipeline:
    body = ALL_REDACT.replace('default_action = "redact"', 'default_action = "block"')
    return make_pipeline(write_policy(tmp_path_factory.mktemp("block"), body))


def run_stream(pipeline: FilterPipeline, chunks: list[str]) -> tuple[str, bool]:
    sf = pipeline.stream(CTX)
    released = []
    for chunk in chunks:
        step = sf.feed(chunk)
        released.append(step.release)
        if step.blocked:
            return "".join(released), True
    step = sf.finish()
    released.append(step.release)
    return "".join(released), step.blocked


def splits(text: str, seed: int) -> list[list[str]]:
    ways = [[text[:k], text[k:]] for k in range(len(text) + 1)]
    ways.append(list(text))
    rng = random.Random(seed)
    for _ in range(20):
        chunks, pos = [], 0
        while pos < len(text):
            step = rng.randint(1, 7)
            chunks.append(text[pos : pos + step])
            pos += step
        ways.append(chunks)
    return ways


@pytest.mark.parametrize(("text", "value"), SAMPLES)
def test_redacted_value_never_leaks_at_any_split(redacting: FilterPipeline, text: str, value: str) -> None:
    expected = redacting.check_response(text, CTX).texts[0]
    assert value not in expected and "[REDACTED:" in expected
    for i, chunks in enumerate(splits(text, seed=hash(value) & 0xFFFF)):
        released, blocked = run_stream(redacting, chunks)
        assert not blocked
        assert released == expected, f"split {i}: {[len(c) for c in chunks]}"


@pytest.mark.parametrize(("text", "value"), SAMPLES)
def test_blocked_stream_releases_nothing_of_the_value(
    blocking: FilterPipeline, text: str, value: str
) -> None:
    start = text.index(value)
    for chunks in splits(text, seed=start):
        released, blocked = run_stream(blocking, chunks)
        assert blocked
        assert text[:start].startswith(released)


def test_blocked_stream_stays_blocked(blocking: FilterPipeline) -> None:
    sf = blocking.stream(CTX)
    assert sf.feed("key AKIAIOSFODNN7EXAMPLE" + " " * 300).blocked
    assert sf.feed("more text").release == ""
    assert sf.finish().blocked
    assert [(f.type, f.action, f.direction) for f in sf.findings] == [("secret", "block", "response")]


def test_clean_text_is_released_after_the_hold_back(redacting: FilterPipeline) -> None:
    sf = redacting.stream(CTX)
    first = sf.feed("x" * (sf.hold_len + 10))
    assert first.release == "x" * 10
    assert sf.finish().release == "x" * sf.hold_len
    assert sf.findings == ()


def test_hold_back_shrinks_when_long_detectors_only_flag(tmp_path: Path) -> None:
    body = ALL_REDACT + '[actions]\nemail = "flag"\nsecret = "flag"\n'
    pipeline = make_pipeline(write_policy(tmp_path, body))
    sf = pipeline.stream(CTX)
    assert sf.hold_len < 200  # email (254) and secret (181) no longer count
    out = sf.feed("mail a@b.com " + "y" * 200).release + sf.finish().release
    assert out == "mail a@b.com " + "y" * 200
    assert [(f.type, f.action) for f in sf.findings] == [("email", "flag")]


class ExplodesOnDigits:
    name = "boom"
    max_match_len = 4
    priority = 1

    def scan(self, text: str) -> list[Span]:
        if "9" in text:
            raise RuntimeError("bug")
        return []


def test_stream_detector_failure_blocks(tmp_path: Path) -> None:
    pipeline = make_pipeline(write_policy(tmp_path), extra_detectors=[ExplodesOnDigits()])
    sf = pipeline.stream(CTX)
    assert not sf.feed("hello ").blocked
    assert sf.feed("9").blocked
    assert sf.findings[0].type == "detector_failed:boom"


def test_stream_detector_failure_redacts_what_is_held(tmp_path: Path) -> None:
    body = ALL_REDACT.replace('on_error = "block"', 'on_error = "redact"')
    pipeline = make_pipeline(write_policy(tmp_path, body), extra_detectors=[ExplodesOnDigits()])
    sf = pipeline.stream(CTX)
    sf.feed("secret 9")
    out = sf.feed(" tail").release + sf.finish().release
    assert "secret" not in out


def test_expanding_characters_around_a_value_split_anywhere(redacting: FilterPipeline) -> None:
    text = "ﬁ邮箱ﬁa@b.coﬁ㎏ end"
    expected = redacting.check_response(text, CTX).texts[0]
    assert expected == "ﬁ邮箱[REDACTED:EMAIL] end"  # the address reads "fia@b.cofikg" once normalized
    for chunks in splits(text, seed=3):
        assert run_stream(redacting, chunks) == (expected, False)
