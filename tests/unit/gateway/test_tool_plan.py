"""Forced tool calls: each syntax's grammar takes exactly a well-formed call of an allowed function."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from tokenizers import Tokenizer as HFTokenizer

from engine.loading.demo import build_demo_files
from engine.sampling.grammar_compiler import GrammarCompiler
from gateway.errors import BadRequestError
from gateway.openai_types import ChatCompletionRequest
from gateway.tool_call_parser import parse_whole
from gateway.tool_plan import ToolPlan

FX = {
    "type": "function",
    "function": {
        "name": "fx_rate",
        "parameters": {
            "type": "object",
            "properties": {"pair": {"type": "string", "enum": ["EURUSD", "USDCHF"]}},
            "required": ["pair"],
            "additionalProperties": False,
        },
    },
}
PING = {"type": "function", "function": {"name": "ping"}}


def request(**fields: Any) -> ChatCompletionRequest:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}
    return msgspec.json.decode(json.dumps(body), type=ChatCompletionRequest)


@pytest.fixture(scope="module")
def demo() -> tuple[GrammarCompiler, HFTokenizer]:
    files = build_demo_files("demo-chat")
    config = json.loads(files["config.json"])
    hf = HFTokenizer.from_str(files["tokenizer.json"].decode())
    return GrammarCompiler(hf.to_str(), config["vocab_size"], {config["eos_token_id"]}), hf


def takes(demo: tuple[GrammarCompiler, HFTokenizer], plan: ToolPlan, text: str) -> bool:
    compiler, hf = demo
    grammar = plan.grammar()
    assert grammar is not None
    matcher = compiler.matcher(grammar).ll
    ids = hf.encode(text, add_special_tokens=False).ids
    return all(matcher.consume_token(t) for t in ids) and matcher.is_accepting()


CALLS = {
    "hermes": (
        '<tool_call>\n{"name":"fx_rate","arguments":{"pair":"EURUSD"}}\n</tool_call>',
        "\n</tool_call>\n",
    ),
    "mistral": ('[{"name":"fx_rate","arguments":{"pair":"EURUSD"}}]', "]"),
    "llama3": ('{"name":"fx_rate","parameters":{"pair":"EURUSD"}}', ""),
}


@pytest.mark.parametrize("syntax", sorted(CALLS))
def test_each_syntax_grammar_takes_a_valid_call_and_nothing_else(
    demo: tuple[GrammarCompiler, HFTokenizer], syntax: str
) -> None:
    call, _ = CALLS[syntax]
    plan = ToolPlan.of(request(tools=[FX, PING], tool_choice="required"), syntax, "m")
    assert plan is not None and takes(demo, plan, call)
    assert [c.name for c in parse_whole(syntax, call)[1]] == ["fx_rate"]
    assert not takes(demo, plan, call.replace("EURUSD", "GBPUSD"))  # outside the schema
    assert not takes(demo, plan, call.replace("fx_rate", "rm_rf"))  # no such function
    named = ToolPlan.of(
        request(tools=[FX, PING], tool_choice={"type": "function", "function": {"name": "ping"}}), syntax, "m"
    )
    assert named is not None and not takes(demo, named, call)  # only the named one


def test_parallel_calls_only_when_allowed(demo: tuple[GrammarCompiler, HFTokenizer]) -> None:
    one = '<tool_call>\n{"name":"fx_rate","arguments":{"pair":"EURUSD"}}\n</tool_call>'
    two = one + "\n" + one
    many = ToolPlan.of(request(tools=[FX], tool_choice="required"), "hermes", "m")
    single = ToolPlan.of(
        request(tools=[FX], tool_choice="required", parallel_tool_calls=False), "hermes", "m"
    )
    assert many is not None and single is not None
    assert takes(demo, many, two) and not takes(demo, single, two) and takes(demo, single, one)


def test_auto_and_none_leave_generation_free() -> None:
    for choice in ("auto", "none"):
        plan = ToolPlan.of(request(tools=[FX], tool_choice=choice), "hermes", "m")
        assert plan is not None and plan.grammar() is None
        assert plan.parses_calls is (choice == "auto")
    assert ToolPlan.of(request(), "hermes", "m") is None


@pytest.mark.parametrize(
    ("fields", "syntax", "param"),
    [
        ({"tools": [FX]}, "", "tools"),  # the model's template takes no tools
        ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "hermes", "tools[0].function.name"),
        ({"tools": [FX, FX]}, "hermes", "tools[1].function.name"),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]},
            "hermes",
            "tools[0].function.parameters",
        ),
        ({"tool_choice": "required"}, "hermes", "tool_choice"),
        (
            {"tools": [FX], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "hermes",
            "tool_choice",
        ),
        (
            {"tools": [FX], "tool_choice": "required", "response_format": {"type": "json_object"}},
            "hermes",
            "tool_choice",
        ),
    ],
)
def test_bad_definitions_and_choices_name_the_param(fields: dict[str, Any], syntax: str, param: str) -> None:
    with pytest.raises(BadRequestError) as err:
        ToolPlan.of(request(**fields), syntax, "m")
    assert err.value.param == param
