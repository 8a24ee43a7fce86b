import math

import pytest

from audit.canonical import canonical_json, es_number

# RFC 8785 appendix B and section 3.2.2.3 examples.
NUMBERS = [
    (0.0, "0"),
    (-0.0, "0"),
    (5e-324, "5e-324"),
    (1.7976931348623157e308, "1.7976931348623157e+308"),
    (9007199254740992.0, "9007199254740992"),
    (295147905179352830000.0, "295147905179352830000"),
    (1e21, "1e+21"),
    (1e-7, "1e-7"),
    (0.000001, "0.000001"),
    (0.00001, "0.00001"),
    (333333333.3333333, "333333333.3333333"),
    (4.5, "4.5"),
    (2e-3, "0.002"),
    (1e23, "1e+23"),
    (-1.5e-9, "-1.5e-9"),
]


@pytest.mark.parametrize(("value", "expected"), NUMBERS)
def test_numbers_follow_ecmascript(value: float, expected: str) -> None:
    assert es_number(value) == expected
    assert canonical_json(value) == expected.encode()


def test_rfc8785_sample_object() -> None:
    value = {
        "numbers": [333333333.3333333, 1e30, 4.5, 0.002, 1e-27],
        "string": '€$\u000f\nA\'B"\\\\"/',
        "literals": [None, True, False],
    }
    expected = '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    assert canonical_json(value).decode() == expected


def test_keys_sort_by_utf16_code_units() -> None:
    # U+1F600 (surrogates D83D..) sorts before U+FB33 in UTF-16, after it in code points.
    value = {"\ufb33": 1, "\U0001f600": 2, "a": 3}
    assert canonical_json(value).decode() == '{"a":3,"\U0001f600":2,"\ufb33":1}'


def test_rejects_non_finite_numbers() -> None:
    with pytest.raises(ValueError):
        canonical_json({"x": math.inf})
    with pytest.raises(ValueError):
        canonical_json(math.nan)


def test_fast_and_slow_paths_agree() -> None:
    from audit.canonical import _encode

    for value in [{"a": 1.25, "b": [1, "x", None]}, {"z": 12.5, "a": {"c": 2.0}}]:
        assert canonical_json(value).decode() == _encode({k: v for k, v in value.items()}).replace("2.0", "2")
