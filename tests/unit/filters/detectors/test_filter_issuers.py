"""Issuer validation: card scheme ranges and lengths, resident ID province and birth date."""

from __future__ import annotations

import datetime

import pytest

from filters.checksum import luhn_valid, resident_id_check
from filters.detectors.card_scheme import SCHEMES, card_scheme, is_issuable
from filters.detectors.cn_resident_id import is_issuable as id_issuable


def luhn_complete(body: str) -> str:
    return next(body + d for d in "0123456789" if luhn_valid(body + d))


@pytest.mark.parametrize(
    ("prefix", "length", "scheme"),
    [
        ("4", 13, "visa"), ("4", 16, "visa"), ("4", 19, "visa"),
        ("51", 16, "mastercard"), ("55", 16, "mastercard"),
        ("2221", 16, "mastercard"), ("2720", 16, "mastercard"),
        ("34", 15, "amex"), ("37", 15, "amex"),
        ("62", 16, "unionpay"), ("62", 19, "unionpay"),
        ("6011", 16, "discover"), ("644", 19, "discover"), ("65", 16, "discover"),
        ("3528", 16, "jcb"), ("3589", 19, "jcb"),
        ("300", 14, "diners"), ("36", 14, "diners"), ("38", 16, "diners"),
        ("2200", 16, "mir"), ("2204", 19, "mir"),
    ],
)  # fmt: skip
def test_issued_ranges_and_lengths(prefix: str, length: int, scheme: str) -> None:
    number = prefix.ljust(length, "0")
    assert card_scheme(number) == scheme
    assert is_issuable(number)


@pytest.mark.parametrize(
    ("prefix", "length"),
    [
        ("4", 15), ("4", 17),  # Visa is 13, 16 or 19
        ("50", 16), ("56", 16), ("2220", 16), ("2721", 16),  # around Mastercard
        ("34", 16), ("35", 15),  # Amex is 15 only; 35xx is not Amex
        ("3527", 16), ("3590", 16),  # around JCB 3528-3589
        ("2205", 16),  # past Mir
        ("9558", 19), ("1", 16), ("7", 16), ("0", 16),  # no scheme at all
    ],
)  # fmt: skip
def test_what_no_scheme_issues(prefix: str, length: int) -> None:
    assert not is_issuable(prefix.ljust(length, "0"))


def test_prefix_table_agrees_with_the_scheme_list() -> None:
    for prefix in range(0, 10_000, 7):
        head = f"{prefix:04d}"
        for length in range(13, 20):
            number = head.ljust(length, "5")
            assert is_issuable(number) == any(s.issues(number) for s in SCHEMES), number


def resident_id(first17: str) -> str:
    return first17 + resident_id_check(first17)


def test_resident_id_checks_province_birth_date_and_check_character() -> None:
    today = datetime.date(2026, 12, 3)
    assert id_issuable(resident_id("11010519491231002"), today)
    assert id_issuable(resident_id("81000020001231002"), today)  # Hong Kong residence permit
    assert not id_issuable(resident_id("10010519491231002"), today)  # province 10
    assert not id_issuable(resident_id("11010519490231002"), today)  # 31 February
    assert not id_issuable(resident_id("11010519491301002"), today)  # month 13
    assert not id_issuable(resident_id("11010520271231002"), today)  # born in the future
    assert not id_issuable(resident_id("11010517991231002"), today)  # before 1800
    assert not id_issuable("11010519491231002" + "0", today)  # check character wrong (it is x)
