"""``us_to_iso`` is hashed into every record (its ``time``): its text must never change."""

from __future__ import annotations

import datetime as dt

import pytest

from audit.record import iso_to_us, us_to_iso

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _strftime(time_us: int) -> str:
    """The format records were always written in."""
    return (_EPOCH + dt.timedelta(microseconds=time_us)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.mark.parametrize(
    "time_us",
    [
        0,
        1,
        -1,
        999_999,
        1_000_000,
        -1_000_001,
        1_796_400_000_123_456,
        1_796_400_000_000_000,
        951_782_400_000_000,  # 2000-02-29
        -62_135_596_800_000_000,  # 0001-01-01: glibc writes the year unpadded
        253_402_300_799_999_999,  # 9999-12-31T23:59:59.999999
    ],
)
def test_us_to_iso_is_the_strftime_text(time_us: int) -> None:
    assert us_to_iso(time_us) == _strftime(time_us)


def test_records_in_one_second_differ_only_in_microseconds() -> None:
    base = 1_796_400_000_000_000
    assert [us_to_iso(base + d) for d in (0, 7, 999_999, 1_000_000)] == [
        "2026-12-04T16:00:00.000000Z",
        "2026-12-04T16:00:00.000007Z",
        "2026-12-04T16:00:00.999999Z",
        "2026-12-04T16:00:01.000000Z",
    ]


def test_round_trip() -> None:
    for time_us in (0, 1_796_400_000_123_456, -5):
        assert iso_to_us(us_to_iso(time_us)) == time_us
