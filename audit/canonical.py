"""RFC 8785 (JCS) canonical JSON: the exact bytes that are hashed and signed.

The fast path is ``json.dumps`` with sorted keys and no whitespace, which is already JCS for
ASCII keys, strings and ints, and floats whose Python ``repr`` equals the ECMAScript form
(non-integral with 1e-4 <= |x| < 1e16). Anything else takes the slow, pure encoder, which
formats numbers per ECMAScript ``Number.prototype.toString`` and sorts keys by UTF-16 code units.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any


class _SlowPath(Exception):
    pass


def canonical_json(value: Any) -> bytes:
    """Serialise ``value`` (dicts, lists, str, int, float, bool, None) to JCS bytes."""
    try:
        prepared = _prepare(value)
    except _SlowPath:
        return _encode(value).encode("utf-8")
    text = json.dumps(prepared, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.encode("utf-8")


def _prepare(value: Any) -> Any:
    # Exact built-in types first: every audit record goes through here, and isinstance against
    # the Mapping / Sequence ABCs costs more than the rest of the walk.
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is dict:
        return _prepare_mapping(value)
    if kind is list or kind is tuple:
        return [_prepare(item) for item in value]
    if isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("canonical JSON has no NaN or infinity")
        if value.is_integer():
            if abs(value) < 2**53:
                return int(value)
            raise _SlowPath
        if 1e-4 <= abs(value) < 1e16:
            return value
        raise _SlowPath
    if isinstance(value, Mapping):
        return _prepare_mapping(value)
    if isinstance(value, Sequence):
        return [_prepare(item) for item in value]
    raise TypeError(f"cannot canonicalise {type(value).__name__}")


def _prepare_mapping(value: Mapping[Any, Any]) -> dict[str, Any]:
    out = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise TypeError("canonical JSON object keys must be strings")
        if not key.isascii():
            raise _SlowPath
        out[key] = _prepare(item)
    return out


def _encode(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return es_number(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        keys = sorted(value, key=lambda k: k.encode("utf-16-be"))
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + _encode(value[k]) for k in keys) + "}"
    if isinstance(value, Sequence):
        return "[" + ",".join(_encode(item) for item in value) + "]"
    raise TypeError(f"cannot canonicalise {type(value).__name__}")


def es_number(value: float) -> str:
    """ECMAScript Number::toString for a finite double (RFC 8785 section 3.2.2.3)."""
    if not math.isfinite(value):
        raise ValueError("canonical JSON has no NaN or infinity")
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    text = repr(abs(value))
    mantissa, _, exp_text = text.partition("e")
    exponent = int(exp_text) if exp_text else 0
    int_part, _, frac_part = mantissa.partition(".")
    all_digits = int_part + frac_part
    stripped = all_digits.lstrip("0")
    # value = 0.DIGITS x 10^n
    n = len(int_part) + exponent - (len(all_digits) - len(stripped))
    digits = stripped.rstrip("0")
    k = len(digits)
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * (-n) + digits
    e = n - 1
    exp = ("+" if e >= 0 else "-") + str(abs(e))
    if k == 1:
        return sign + digits + "e" + exp
    return sign + digits[0] + "." + digits[1:] + "e" + exp
