"""A passphrase or PIN held in memory: never printed, logged or pickled."""

from __future__ import annotations

import os
from typing import NoReturn

from keys.errors import KeysConfigError


class Secret:
    """Opaque holder of a secret string; ``reveal()`` is the only way to the value."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if not value:
            raise KeysConfigError("an empty passphrase or PIN is not accepted")
        self._value = value

    @classmethod
    def from_env(cls, var: str) -> Secret:
        """The secret held in environment variable ``var``; KeysConfigError naming the variable if unset."""
        value = os.environ.get(var)
        if not value:
            raise KeysConfigError(f"environment variable {var} is not set (it must hold the secret)")
        return cls(value)

    def reveal(self) -> bytes:
        return self._value.encode()

    def __repr__(self) -> str:
        return "Secret(<redacted>)"

    __str__ = __repr__

    def __reduce__(self) -> NoReturn:
        raise TypeError("Secret cannot be pickled")
