"""Secrets taken out of settings before they are shown (``strongroom config show``).

Settings hold secrets in three shapes, and each is caught whatever its section is called, so a
key added later is covered too:

    a password inside a string    postgresql://app:<redacted>@db/audit   password=<redacted>
    a field named for a secret    *password*, *passphrase*, *secret*, *pin*, *token*, *api_key*
                                  (a string value; ``*_env`` / ``*_file`` name where a secret
                                  lives, which is not itself secret, and stay)
    header maps                   every value of a ``*headers`` table (``authorization``, API keys)
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["REDACTED", "redacted"]

REDACTED = "<redacted>"

_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*):(?P<secret>[^@/\s]*)@")
_KV_PASSWORD = re.compile(
    r"(?P<head>\b(?:password|passwd|pwd|sslpassword|pin|token|secret)\s*=\s*)"
    r"(?P<secret>'(?:[^'\\]|\\.)*'|[^\s&;]+)",
    re.IGNORECASE,
)
_SECRET_NAME = re.compile(r"password|passwd|passphrase|secret|(?:^|_)pin(?:_|$)|token|api_?key|credential")
_REFERENCE_SUFFIXES = ("_env", "_file", "_files", "_path", "_label", "_prefix", "_id")


def redacted(value: Any, key: str = "") -> Any:
    """``value`` (plain data: dicts, lists, scalars) with every secret replaced by ``<redacted>``."""
    if isinstance(value, dict):
        if key.lower().endswith("headers"):
            return {k: REDACTED for k in value}
        return {k: redacted(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redacted(v, key) for v in value]
    if isinstance(value, str):
        name = key.lower()
        if value and _SECRET_NAME.search(name) and not name.endswith(_REFERENCE_SUFFIXES):
            return REDACTED
        value = _URL_PASSWORD.sub(rf"\g<head>:{REDACTED}@", value)
        return _KV_PASSWORD.sub(rf"\g<head>{REDACTED}", value)
    return value
