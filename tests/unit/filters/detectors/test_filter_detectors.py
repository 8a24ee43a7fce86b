import random
import re

import pytest

from filters.detectors import builtin_detectors
from filters.detectors.payment_card import follows_grouped_code
from filters.normalized import normalize

DETECTORS = {d.name: d for d in builtin_detectors()}


def found(name: str, text: str) -> list[str]:
    norm = normalize(text)
    return [norm.original[slice(*norm.to_original(a, b))] for a, b in DETECTORS[name].scan(norm.text)]


POSITIVES = [
    ("payment_card", "卡号6222021234567890128谢谢", "6222021234567890128"),
    ("payment_card", "card 4111 1111 1111 1111.", "4111 1111 1111 1111"),
    ("payment_card", "card 4111-1111-1111-1111", "4111-1111-1111-1111"),
    ("payment_card", "银联 6222 0212 3456 7890 12", "6222 0212 3456 7890 12"),
    ("payment_card", "卡号６２２２０２１２３４５６７８９０１２８", "６２２２０２１２３４５６７８９０１２８"),
    ("cn_resident_id", "身份证号11010519491231002X。", "11010519491231002X"),
    ("cn_resident_id", "ID 440524188001010014", "440524188001010014"),
    ("cn_credit_code", "代码91350100M000100Y43号", "91350100M000100Y43"),
    ("cn_mobile", "手机13812345678", "13812345678"),
    ("cn_mobile", "call +86 138-1234-5678 now", "+86 138-1234-5678"),
    ("iban", "IBAN DE89 3704 0044 0532 0130 00 thanks", "DE89 3704 0044 0532 0130 00"),
    ("iban", "pay GB82WEST12345698765432", "GB82WEST12345698765432"),
    ("us_ssn", "SSN 078-05-1120.", "078-05-1120"),
    ("email", "邮箱是zhang.san@example.com谢谢", "zhang.san@example.com"),
    ("email", "Mail <John.Doe+x@mail.example.co.uk>", "John.Doe+x@mail.example.co.uk"),
    ("phone", "call (415) 555-2671 today", "(415) 555-2671"),
    ("phone", "tel +44 20 7946 0958", "+44 20 7946 0958"),
    ("ipv4", "host 192.168.10.254, ok", "192.168.10.254"),
    ("secret", "key AKIAIOSFODNN7EXAMPLE here", "AKIAIOSFODNN7EXAMPLE"),
    ("secret", "token ghp_" + "a1B2" * 9, "ghp_" + "a1B2" * 9),
    ("secret", 'api_key = "a8f9Kq2LmZ7xP0vB3nW5"', "a8f9Kq2LmZ7xP0vB3nW5"),
    ("secret", "password: hunter22", "hunter22"),
]


@pytest.mark.parametrize(("name", "text", "value"), POSITIVES)
def test_detects_value(name: str, text: str, value: str) -> None:
    assert found(name, text) == [value]


NEGATIVES = [
    ("payment_card", "card 4111 1111 1111 1112"),  # Luhn fails
    ("payment_card", "order 41111111111111110000"),  # 22 digits is not a card
    ("payment_card", "tel +86 135-8414-5140"),  # a phone, not a 13-digit card
    ("payment_card", "IBAN GB74 HYRE 9238 4073 0626 86"),  # tail of an IBAN-shaped code
    ("payment_card", "ref GB94BDMU41953843318453"),  # digits glued to letters
    ("cn_resident_id", "身份证号11010519491231002Y"),
    ("cn_resident_id", "ID 440524188001010015"),  # check digit off by one
    ("cn_credit_code", "代码91350100M000100Y44"),
    ("cn_mobile", "编号12812345678"),  # no 12x mobile prefix
    ("cn_mobile", "号码138123456789"),  # 12 digits
    ("iban", "IBAN DE89 3704 0044 0532 0130 01"),
    ("iban", "ref XX89370400440532013000"),  # unknown country
    ("us_ssn", "SSN 000-12-3456"),
    ("us_ssn", "SSN 666-12-3456"),
    ("us_ssn", "number 078051120"),  # no separators
    ("email", "not an email: user@localhost"),
    ("phone", "call (115) 555-2671"),
    ("phone", "id 12515000806"),  # a bare leading 1 needs a separator
    ("phone", "iban 0019 8616 535"),  # international needs +  # area codes never start with 1
    ("ipv4", "version 1.2.3 and 256.1.1.1 and 1.2.3.4.5"),
    ("secret", "api_key = aaaaaaaaaaaaaaaaaaaa"),  # low entropy
    ("secret", "akia short"),
]


@pytest.mark.parametrize(("name", "text"), NEGATIVES)
def test_rejects_look_alike(name: str, text: str) -> None:
    assert found(name, text) == []


def test_private_key_block_runs_to_its_end_line_or_end_of_text() -> None:
    block = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIB\nAAKCAQ==\n-----END RSA PRIVATE KEY-----"
    assert found("secret", f"here: {block} done") == [block]
    open_block = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk"
    assert found("secret", f"here: {open_block}") == [open_block]


def test_every_span_respects_max_match_len() -> None:
    long_text = " ".join(text for _, text, _ in POSITIVES)
    norm = normalize(long_text)
    for detector in DETECTORS.values():
        for start, end in detector.scan(norm.text):
            assert end - start <= detector.max_match_len, detector.name


def test_grouped_code_walk_equals_the_look_back_regex() -> None:
    look_back = re.compile(r"(?<![0-9a-z])[a-z]{2}[0-9]{2}(?: [0-9a-z]{4})* $")
    rng = random.Random(11)
    pieces = [*"ab12 \nx中9", "de89 ", "3704 ", "gb74 hyre ", "ab12"]
    for _ in range(5_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 10)))
        for start in range(len(text) + 1):
            assert follows_grouped_code(text, start) == bool(look_back.search(text, 0, start)), (text, start)


def test_card_after_iban_groups_far_into_a_long_text_is_not_a_card() -> None:
    text = "中" * 5_000 + " gb74 hyre 9238 4111 1111 1111 1111"
    assert found("payment_card", text) == []
    assert found("payment_card", "中" * 5_000 + " card 4111 1111 1111 1111") == ["4111 1111 1111 1111"]
