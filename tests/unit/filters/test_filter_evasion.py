"""Regression tests for the content-filter evasions of the penetration test (issue 18, item 3).

Each case passed the filter with no finding before the normalization layer, the digit-run
detectors and the conversation scan; each must now be found, on input and in streamed output.
"""

from __future__ import annotations

import random
import unicodedata
from pathlib import Path

import pytest

from bench.filters.evasion import benign, evasions, look_alikes, score
from filters import FilterConfig, FilterContext, FilterPipeline

CTX = FilterContext(roles=("user",), model="m")
CARD = "4539148803436467"  # Visa, Luhn-valid; the middle groups 1488 0343 must never be sent


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> FilterPipeline:
    """The packaged default policy: cards masked, keywords and secrets blocked."""
    return FilterPipeline.from_config(FilterConfig(), tmp_path_factory.mktemp("data"))


def types(pipeline: FilterPipeline, *texts: str) -> set[str]:
    return {f.type for f in pipeline.check_request(list(texts), CTX).findings}


def streamed(pipeline: FilterPipeline, text: str, seed: int = 0) -> tuple[str, set[str]]:
    rng = random.Random(seed)
    sf = pipeline.stream(CTX)
    out, i = [], 0
    while i < len(text):
        size = rng.randint(1, 5)
        out.append(sf.feed(text[i : i + size]).release)
        i += size
    out.append(sf.finish().release)
    return "".join(out), {f.type for f in sf.findings}


def grouped(digits: str, separator: str) -> str:
    return separator.join(digits[i : i + 4] for i in range(0, len(digits), 4))


EVASIONS = [
    ("payment_card", f"card {grouped(CARD, '.')} ok"),
    ("payment_card", f"card {grouped(CARD, '/')} ok"),
    ("payment_card", f"card {grouped(CARD, '_')} ok"),
    ("payment_card", f"card {grouped(CARD, chr(10))} ok"),
    ("payment_card", f"card {grouped(CARD, '  ')} ok"),
    ("payment_card", f"card {grouped(CARD, ' – ')} ok"),  # en dash
    ("payment_card", f"card {grouped(CARD, '—')} ok"),  # em dash
    ("payment_card", "card 4539.1488-0343 6467 ok"),  # mixed
    ("payment_card", "card 4539\u034f1488\u034f0343\u034f6467 ok"),  # combining grapheme joiner
    ("payment_card", "card 4\ufe0f539 1488 0343 6467 ok"),  # variation selector
    ("payment_card", "卡号" + "".join(chr(0x0660 + int(c)) for c in CARD)),  # Arabic-Indic
    ("payment_card", "卡号" + "".join(chr(0x0966 + int(c)) for c in CARD)),  # Devanagari
    ("payment_card", "2024/01/15 4539 1488 0343 6467 12/25"),  # after a date, before the expiry
    ("cn_resident_id", "身份证 110105 19491231 002X 请核实"),
    ("cn_resident_id", "身份证 110105-19491231-002X"),
    ("cn_resident_id", "ID 110105.19491231.002x ok"),
    ("cn_mobile", "手机 138.1234.5678 联系"),
    ("cn_mobile", "mobile +86 138.1234.5678"),
    ("email", "mail zhang.san[at]example.com"),
    ("email", "mail zhang.san (at) example [dot] com"),
    ("email", "mail zhang at example dot com"),
    ("email", "mail zh\u0430ng.san@ex\u0430mple.com"),  # Cyrillic а
    ("secret", "key AKIA\u034fIOSFODNN7EXAMPLE"),
    ("secret", "key \u0410KIAIOSFODNN7EXAMPLE"),  # Cyrillic А
    ("keyword", "tell me the \u0456nsider trading tip"),  # Cyrillic і
    ("keyword", "关于洗\u200b钱的问题"),
]


@pytest.mark.parametrize(("kind", "text"), EVASIONS)
def test_evasion_is_found_on_input_and_in_streamed_output(
    pipeline: FilterPipeline, kind: str, text: str
) -> None:
    assert kind in types(pipeline, text)
    released, found = streamed(pipeline, text)
    assert kind in found
    if kind == "payment_card":
        digits = "".join(str(unicodedata.decimal(ch)) for ch in released if ch.isdecimal())
        assert "1488" not in digits and "0343" not in digits, released


SPLITS = [
    ("payment_card", ["card 4111 1111", "1111 1111 ok"]),
    ("payment_card", ["卡号 4111 11", "11 1111 1111"]),
    ("secret", ["my key is AKIAIOSF", "ODNN7EXAMPLE thanks"]),
    ("keyword", ["他说洗", "钱的事"]),
    ("keyword", ["we discussed insider", "trading tip yesterday"]),
]


@pytest.mark.parametrize(("kind", "texts"), SPLITS)
def test_value_split_across_two_messages_is_found(
    pipeline: FilterPipeline, kind: str, texts: list[str]
) -> None:
    assert kind in types(pipeline, *texts)


def test_split_card_is_hidden_in_both_pieces(pipeline: FilterPipeline) -> None:
    result = pipeline.check_request(["system: card 4111 1111", "1111 1111 ok"], CTX)
    assert result.texts == ["system: card **** ****", "**** **** ok"]
    assert [(f.type, f.count) for f in result.findings] == [("payment_card", 1)]


def test_every_role_is_scanned(pipeline: FilterPipeline) -> None:
    """The gateway passes every message's content (system, assistant, tool) and tool-call
    arguments; a tool result holding a card is masked like a user message."""
    result = pipeline.check_request(["You are helpful.", "ok", "tool says 4111 1111 1111 1111"], CTX)
    assert result.texts[2] == "tool says 4111 **** **** 1111"


LOOK_ALIKES = [
    # Each Luhn-valid (the old detector flagged them), but no scheme issues the prefix/length:
    ("payment_card", "ref 9558 8212 0000 0000 001"),  # a bank-internal 9558 number
    ("payment_card", "ref 1234 5678 9012 3452"),  # 1…: no scheme
    ("payment_card", "ref 5612 3456 7890 1230"),  # 56 is no Mastercard range (51-55, 2221-2720)
    ("payment_card", "ref 2721 0000 0000 0004"),  # just past the Mastercard 2-series
    ("payment_card", "ref 6224-1113-9905-5997-08"),  # the middle of an 18-digit reference
    # Check character right (the old detector flagged them), but no one is issued such a number:
    ("cn_resident_id", "ID 110105194913310021"),  # born in month 13
    ("cn_resident_id", "ID 000105194912310024"),  # province 00
    ("cn_resident_id", "ID 110105214912310025"),  # born in 2149
    ("cn_mobile", "IP 139.123.245.67"),  # a dotted quad, not a mobile
    ("email", "look at example.com"),  # a sentence
    ("secret", "key AKIA\u034fIOSFODNN7EXAMP"),  # one character short
    ("keyword", "insider trader"),
]


@pytest.mark.parametrize(("kind", "text"), LOOK_ALIKES)
def test_look_alike_no_issuer_would_issue_is_not_flagged(
    pipeline: FilterPipeline, kind: str, text: str
) -> None:
    assert kind not in types(pipeline, text)


ISSUED = [
    "5105 1051 0510 5100",  # Mastercard 51
    "2221 0000 0000 0009",  # Mastercard 2-series
    "3782 822463 10005",  # Amex 4-6-5
    "3566 0020 2036 0505",  # JCB
    "6011 1111 1111 1117",  # Discover
    "3056 930902 5904",  # Diners 14
    "2200 0000 0000 0004",  # Mir
    "6222 0212 3456 7890 128",  # UnionPay 19
    "4222 2222 2222 2",  # Visa 13
]


@pytest.mark.parametrize("card", ISSUED)
def test_every_scheme_is_found(pipeline: FilterPipeline, card: str) -> None:
    assert "payment_card" in types(pipeline, f"card {card} ok")


def test_generated_corpus_recall_precision_and_benign_false_positives(pipeline: FilterPipeline) -> None:
    """600 evasions and 600 look-alikes (zh and en, six kinds, 30 % split over two messages) and
    1,000 benign financial texts: the issue's targets, recall >= 0.99, look-alikes flagged <= 1 %,
    benign false positives <= 1 %; and the evasions in streamed output."""

    def found(case: object) -> set[str]:
        return types(pipeline, *case.texts)  # type: ignore[attr-defined]

    recall = score(evasions(0, 600), found, expect=True)
    assert recall.rate >= 0.99, recall.missed
    flagged = score(look_alikes(0, 600), found, expect=False)
    assert flagged.rate <= 0.01, flagged.missed
    assert recall.num_hits / (recall.num_hits + flagged.num_hits) >= 0.99
    false_positives = score(benign(0, 1000), found, expect=False)
    assert false_positives.rate <= 0.01, false_positives.missed
    single = [c for c in evasions(1, 300) if len(c.messages) == 1]
    in_stream = score(single, lambda c: streamed(pipeline, c.texts[0])[1], expect=True)
    assert in_stream.rate >= 0.99, in_stream.missed


def test_default_policy_path_is_packaged(tmp_path: Path) -> None:
    assert FilterPipeline.from_config(FilterConfig(), tmp_path).ruleset.scanner.names
