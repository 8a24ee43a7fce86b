"""Tool calls through the client libraries agents are built on: LangChain's ``bind_tools`` and
LiteLLM's ``completion``, pointed at the gateway as an OpenAI-compatible base URL."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

# LiteLLM fetches a model price list from the internet on import unless told to use its own copy.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

pytestmark = pytest.mark.integration


@tool
def fx_rate(pair: str) -> float:
    """The exchange rate of a currency pair such as EURUSD."""
    return 1.1


def test_langchain_bind_tools_returns_tool_calls(gateway: Any) -> None:
    llm = ChatOpenAI(
        model="demo-chat",
        base_url=gateway.v1,
        api_key=gateway.token("alice", "analyst"),  # type: ignore[arg-type]
        max_retries=0,
        max_tokens=120,  # type: ignore[call-arg]
        seed=1,
    )
    bound = llm.bind_tools([fx_rate], tool_choice="fx_rate")
    message = bound.invoke("EUR in USD?")
    assert [c["name"] for c in message.tool_calls] == ["fx_rate"]  # type: ignore[attr-defined]
    assert isinstance(message.tool_calls[0]["args"]["pair"], str)  # type: ignore[attr-defined]
    streamed = None
    for chunk in bound.stream("EUR in USD?"):
        streamed = chunk if streamed is None else streamed + chunk
    assert streamed is not None and [c["name"] for c in streamed.tool_calls] == ["fx_rate"]  # type: ignore[attr-defined]


# LiteLLM's own typing trips a pydantic warning while it loads a provider module.
@pytest.mark.filterwarnings("ignore:Item.*ReadOnly. qualifier:UserWarning")
def test_litellm_completion_returns_tool_calls(gateway: Any) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "fx_rate",
                "parameters": {
                    "type": "object",
                    "properties": {"pair": {"type": "string", "enum": ["EURUSD", "USDCHF"]}},
                    "required": ["pair"],
                },
            },
        }
    ]
    done = litellm.completion(
        model="openai/demo-chat",
        api_base=gateway.v1,
        api_key=gateway.token("alice", "analyst"),
        messages=[{"role": "user", "content": "EUR in USD?"}],
        tools=tools,
        tool_choice="required",
        max_tokens=120,
        seed=2,
        num_retries=0,
    )
    choice = done.choices[0]  # type: ignore[union-attr]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls  # type: ignore[union-attr]
    assert call.function.name == "fx_rate"
    assert json.loads(call.function.arguments)["pair"] in ("EURUSD", "USDCHF")
