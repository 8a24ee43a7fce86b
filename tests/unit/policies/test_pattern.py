from __future__ import annotations

import pytest

from policies.pattern import ModelPatternSet, model_match


@pytest.mark.parametrize(
    ("name", "pattern", "expected"),
    [
        ("qwen-7b", "qwen-7b", True),
        ("qwen-7b-uncensored", "qwen-7b", False),
        ("my-qwen-7b", "qwen-7b", False),
        ("qwen-7b", "qwen-*", True),
        ("qwen-", "qwen-*", True),
        ("qwen", "qwen-*", False),
        ("xqwen-7b", "qwen-*", False),
        ("org/team/model", "org/*", True),
        ("org", "org/*", False),
        ("other/org/x", "org/*", False),
        ("org/a-chat", "org/*-chat", True),
        ("org/a-chat-x", "org/*-chat", False),
        ("a.b", "a.b", True),
        ("axb", "a.b", False),  # '.' is literal, not a regex wildcard
        ("a+b", "a+b", True),
        ("anything/at/all", "*", True),
        ("*", "*", True),
        ("*", "qwen-*", False),
    ],
)
def test_model_match_is_anchored(name: str, pattern: str, expected: bool) -> None:
    assert model_match(name, pattern) is expected
    assert ModelPatternSet([pattern]).matches(name) is expected


def test_pattern_set_combines_literals_and_globs() -> None:
    s = ModelPatternSet(["demo-chat", "qwen-*", "org/*-base"])
    assert s.matches("demo-chat") and s.matches("qwen-1") and s.matches("org/x/y-base")
    assert not s.matches("demo-chat2") and not s.matches("org/x-base-2") and not s.matches("qwen")
    assert not ModelPatternSet([])
