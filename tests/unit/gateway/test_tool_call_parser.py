"""Tool calls read back from each template family's syntax, whole and fed a character at a time."""

from __future__ import annotations

import json

import pytest

from gateway.tool_call_parser import Arguments, CallStart, Content, ToolCallParser, parse_whole

HERMES = (
    'Let me check. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "tags": ["a}", {"b": 1}]}}'
    '\n</tool_call>\n<tool_call>\n{"name": "fx_rate", "arguments": {}}\n</tool_call>'
)
MISTRAL = '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "fx_rate", "arguments": {"pair": "EURUSD"}}]'
LLAMA = '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}'

CASES = [
    (
        "hermes",
        HERMES,
        "Let me check. ",
        [("get_weather", {"city": "Oslo", "tags": ["a}", {"b": 1}]}), ("fx_rate", {})],
    ),
    ("mistral", MISTRAL, "", [("get_weather", {"city": "Oslo"}), ("fx_rate", {"pair": "EURUSD"})]),
    # The markers are special tokens a decoder may drop: the bare forms are calls too.
    (
        "mistral",
        MISTRAL.removeprefix("[TOOL_CALLS]"),
        "",
        [("get_weather", {"city": "Oslo"}), ("fx_rate", {"pair": "EURUSD"})],
    ),
    ("llama3", LLAMA, "", [("get_weather", {"city": "Oslo"})]),
    (
        "llama3",
        ' {"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {}}',
        "",
        [("a", {"x": 1}), ("b", {})],
    ),
]


def streamed(syntax: str, text: str, **kw: int) -> tuple[str, list[tuple[str, str, str]], int]:
    """Content, [(id, name, arguments)] and the number of argument pieces, fed one character at a time."""
    parser = ToolCallParser(syntax, **kw)
    events = [e for ch in text for e in parser.feed(ch)] + parser.finish()
    content = "".join(e.text for e in events if isinstance(e, Content))
    calls: dict[int, list[str]] = {}
    for e in events:
        if isinstance(e, CallStart):
            assert e.index not in calls and e.index == len(calls)  # calls start once, in order
            calls[e.index] = [e.id, e.name, ""]
        elif isinstance(e, Arguments):
            calls[e.index][2] += e.text
    return content, [(i, n, a) for i, n, a in calls.values()], sum(isinstance(e, Arguments) for e in events)


@pytest.mark.parametrize(("syntax", "text", "content", "expected"), CASES)
def test_whole_and_streamed_answers_give_the_same_calls(
    syntax: str, text: str, content: str, expected: list[tuple[str, dict[str, object]]]
) -> None:
    whole_content, calls = parse_whole(syntax, text)
    assert whole_content == content
    assert [(c.name, json.loads(c.arguments)) for c in calls] == expected
    assert all(c.id.startswith("call_") and len(c.id) == 29 for c in calls)
    s_content, s_calls, num_pieces = streamed(syntax, text)
    assert s_content == content
    assert [(n, a) for _, n, a in s_calls] == [(c.name, c.arguments) for c in calls]
    assert num_pieces > len(calls)  # arguments went out in pieces as they arrived


def test_arguments_are_the_models_json_text_as_written() -> None:
    text = '<tool_call>{"name": "f", "arguments": {"a" : [1,  2]}}</tool_call>'
    assert parse_whole("hermes", text)[1][0].arguments == '{"a" : [1,  2]}'
    assert streamed("hermes", text)[1][0][2] == '{"a" : [1,  2]}'


def test_text_that_only_looks_like_a_marker_is_content() -> None:
    for syntax, text in [
        ("hermes", "a < b and <tool is not <tool_call"),
        ("llama3", 'The answer is {"name": "f", "parameters": {}}'),  # not at the start: prose
        ("llama3", '{"answer": 42}'),  # JSON, but not a call
        ("mistral", "[1] see the footnote"),
    ]:
        assert parse_whole(syntax, text) == (text, []), (syntax, text)
        assert streamed(syntax, text)[:2] == (text, []), (syntax, text)


def test_text_after_the_calls_is_content_again() -> None:
    content, calls = parse_whole("hermes", '<tool_call>{"name": "f", "arguments": {}}</tool_call> done')
    assert content == "done" and [c.name for c in calls] == ["f"]


def test_arguments_given_as_a_string_and_keys_out_of_order() -> None:
    text = '<tool_call>{"arguments": {"a": 1}, "name": "f"}</tool_call><tool_call>{"name": "g", "arguments": "{\\"b\\": 2}"}</tool_call>'
    for content, calls in (parse_whole("hermes", text), streamed("hermes", text)[:2]):
        assert content == ""
        pairs = [(c.name, c.arguments) if not isinstance(c, tuple) else (c[1], c[2]) for c in calls]
        assert pairs == [("f", '{"a": 1}'), ("g", '{"b": 2}')]


def test_max_calls_drops_the_extra_calls() -> None:
    assert [c.name for c in parse_whole("hermes", HERMES, max_calls=1)[1]] == ["get_weather"]
    assert [n for _, n, _ in streamed("hermes", HERMES, max_calls=1)[1]] == ["get_weather"]


def test_a_call_cut_off_by_max_tokens_keeps_what_was_sent() -> None:
    content, calls, _ = streamed("hermes", '<tool_call>{"name": "f", "arguments": {"city": "Os')
    assert content == "" and calls[0][1:] == ("f", '{"city": "Os')


def test_an_unknown_syntax_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown"):
        ToolCallParser("pythonic")
