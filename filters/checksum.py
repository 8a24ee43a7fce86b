"""Check-digit algorithms behind the checksum-backed detectors. Inputs are ASCII, already compact."""

from __future__ import annotations

_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_ID_CHECK = "10x98765432"
_USCC_ALPHABET = "0123456789abcdefghjklmnpqrtuwxy"
_USCC_VALUE = {c: i for i, c in enumerate(_USCC_ALPHABET)}
_USCC_WEIGHTS = (1, 3, 9, 27, 19, 26, 16, 17, 20, 29, 25, 13, 8, 24, 10, 30, 28)


_LUHN_DOUBLED = {str(d): (2 * d if d < 5 else 2 * d - 9) for d in range(10)}


def luhn_valid(digits: str) -> bool:
    total = sum(map(int, digits[-1::-2])) + sum(_LUHN_DOUBLED[c] for c in digits[-2::-2])
    return total % 10 == 0


def resident_id_check(first17: str) -> str:
    """ISO 7064 MOD 11-2 check character of a CN resident ID, lower-case ``x`` for 10."""
    total = sum((ord(c) - 48) * w for c, w in zip(first17, _ID_WEIGHTS, strict=True))
    return _ID_CHECK[total % 11]


def resident_id_valid(value: str) -> bool:
    return len(value) == 18 and value[:17].isdigit() and resident_id_check(value[:17]) == value[17]


def credit_code_check(first17: str) -> str:
    """Mod-31 check character of a CN unified social credit code (GB 32100-2015), lower case."""
    total = sum(_USCC_VALUE[c] * w for c, w in zip(first17, _USCC_WEIGHTS, strict=True))
    return _USCC_ALPHABET[(31 - total % 31) % 31]


def credit_code_valid(value: str) -> bool:
    if len(value) != 18 or any(c not in _USCC_VALUE for c in value):
        return False
    return credit_code_check(value[:17]) == value[17]


def iban_valid(compact: str) -> bool:
    """ISO 13616 mod-97 over the rearranged IBAN (letters as 10..35); case-insensitive."""
    rearranged = compact[4:] + compact[:4]
    number = "".join(str(int(c, 36)) for c in rearranged)
    return int(number) % 97 == 1
