"""Model-name patterns: ``*`` is the only wildcard and every match is anchored at both ends.

    pattern        matches                         does not match
    qwen-7b        qwen-7b                         qwen-7b-uncensored, my-qwen-7b
    qwen-*         qwen-7b, qwen-7b-chat           qwen, xqwen-7b
    org/*          org/a, org/team/b  (crosses /)  org, other/a
    *              every name, and the control-plane resource "*"

casbin's built-ins each get one of these wrong (``regexMatch`` is not end-anchored, ``globMatch``'s
``*`` stops at ``/``, ``keyMatch`` is prefix-only), so the same ``model_match`` function is
registered on the reference casbin enforcer and used, compiled, by the decision table.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

__all__ = ["ModelPatternSet", "compile_pattern", "is_glob", "model_match"]


def is_glob(pattern: str) -> bool:
    return "*" in pattern


@lru_cache(maxsize=4096)
def compile_pattern(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")), re.DOTALL)


def model_match(name: str, pattern: str) -> bool:
    """True when ``name`` is matched by ``pattern`` over its whole length."""
    if not is_glob(pattern):
        return name == pattern
    return compile_pattern(pattern).fullmatch(name) is not None


class ModelPatternSet:
    """Several patterns compiled for one question: does any of them match this name?

    Literal names go into a set (one hash lookup); globs are joined into one alternation so the
    regex engine, not a Python loop, walks them.
    """

    __slots__ = ("_exact", "_globs", "_match_all", "patterns")

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = frozenset(patterns)
        self._exact = frozenset(p for p in self.patterns if not is_glob(p))
        globs = sorted(p for p in self.patterns if is_glob(p))
        self._match_all = "*" in self.patterns
        self._globs: re.Pattern[str] | None = None
        if globs and not self._match_all:
            self._globs = re.compile("|".join(f"(?:{compile_pattern(g).pattern})" for g in globs), re.DOTALL)

    def matches(self, name: str) -> bool:
        if self._match_all or name in self._exact:
            return True
        return self._globs is not None and self._globs.fullmatch(name) is not None

    def __bool__(self) -> bool:
        return bool(self.patterns)
